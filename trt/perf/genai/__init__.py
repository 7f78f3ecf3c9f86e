"""``trt perf`` for generative models: streamed text over the OpenAI routes, Triton's ``generate_stream``
and gRPC ``ModelStreamInfer``, measured as NVIDIA's genai-perf and AIPerf define their metrics (time to
first token, inter-token latency, token throughput, goodput), tokens counted with the model's tokenizer."""
