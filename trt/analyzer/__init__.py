"""trt analyze: recommends a config.pbtxt from measurements (issue 7; not built yet)."""
