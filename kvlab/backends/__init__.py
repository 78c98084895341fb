"""Optional backends: kvlab's scenarios on the real systems kvlab models (``trtllm``)."""
