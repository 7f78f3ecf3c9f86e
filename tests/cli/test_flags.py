"""tritonserver's flag forms, parsed into the core's options; a malformed flag says what form it takes."""

from __future__ import annotations

import pytest

from trt.cli.flags import parse_cache_config, parse_rate_limit_resources, parse_trace_config


def test_trace_config_flags_are_checked() -> None:
    assert parse_trace_config(["level=TIMESTAMPS", "level=OFF", "rate=10"]).level == ("TIMESTAMPS",)
    for values, message in (
        (["rate=x"], "integer"),
        (["level=EVERYTHING"], "OFF, TIMESTAMPS or TENSORS"),
        (["opentelemetry,url=http://collector"], "only the triton trace mode"),
        (["triton,colour=red"], "unknown setting 'colour'"),
        (["rate"], "takes [triton,]<setting>=<value>"),
    ):
        with pytest.raises(ValueError, match=message.replace("[", r"\[")):
            parse_trace_config(values)


def test_resource_flags_parse_as_triton_writes_them() -> None:
    assert parse_rate_limit_resources(["R1:4", "GPU_MEM:2:0"]) == {"R1": 4, "GPU_MEM": 2}
    with pytest.raises(ValueError, match="NAME:COUNT"):
        parse_rate_limit_resources(["R1"])


def test_cache_config_takes_triton_local_size_form() -> None:
    assert parse_cache_config(["local,size=1048576"]) == 1048576
    assert parse_cache_config([]) is None
    with pytest.raises(ValueError, match="local,size=BYTES"):
        parse_cache_config(["redis,host=x"])


def test_https_flags_without_use_ssl_are_a_usage_error() -> None:
    import typer

    from trt.cli.serve import _http_tls

    assert _http_tls(False, "", "", "", False) is None
    with pytest.raises(typer.BadParameter, match="need --http-use-ssl=true"):
        _http_tls(False, "server.pem", "", "", False)
    with pytest.raises(typer.BadParameter, match="needs --http-server-cert"):
        _http_tls(True, "", "", "", False)
