"""Real engines beside kvlab: the 4 MiB repro on a real TensorRT-LLM (``trtllm``, optional), and
the real vLLM and SGLang schedulers run as subprocesses in their own environments (``vllm``,
``sglang``, through ``real_engine``), with their stored runs."""
