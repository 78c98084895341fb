"""Real engines beside kvlab: the 4 MiB repro on a real TensorRT-LLM (``trtllm``, optional), and
the real vLLM scheduler run as a subprocess in its own environment (``vllm``, which starts
``vllm_driver``) with its stored runs."""
