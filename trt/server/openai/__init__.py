"""The OpenAI-compatible front end: ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions``.

A transport beside HTTP and gRPC, after Triton's OpenAI-compatible front end (its routes, flags,
port 9000 and the way it drives models): requests become inference requests for models that follow
the I/O contract of Triton's vLLM backend (``text_input``, ``stream``, ``sampling_parameters``,
``exclude_input_in_output`` -> ``text_output``), through ``InferenceServer.infer_stream`` only.
"""
