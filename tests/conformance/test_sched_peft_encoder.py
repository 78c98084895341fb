"""PEFT/LoRA page budgets and encoder requests: nothing kvlab can express.

Lists ``TestPEFT`` and ``TestEncoder`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25, as not modelled: kvlab's scheduler has no PEFT cache
manager (its budget tracker counts tokens and requests only) and no encoder-decoder requests
(ENCODER_INIT, encoder budget, cross-attention KV pool).
"""

NOT_MODELLED = {
    "TestPEFT::test_no_peft_manager": "PEFT/LoRA pages: kvlab requests carry no LoRA task id and the scheduler takes no PEFT cache manager",
    "TestPEFT::test_peft_sufficient": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_peft_exceeded": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_same_task_id_deduplication": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_peft_fail_before_kv_alloc": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_peft_commit_only_after_kv_success": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_no_lora_task_id": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_gen_peft_check": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_encoder_peft_check": "PEFT/LoRA pages on an encoder-decoder request: kvlab has neither a PEFT budget nor ENCODER_INIT requests",
    "TestPEFT::test_mixed_peft_gen_claims_reduce_ctx": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_pages_per_task_varies": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestPEFT::test_peft_resets_between_calls": "PEFT/LoRA pages: kvlab's scheduler has no PEFT cache manager nor LoRA task ids",
    "TestEncoder::test_encoder_scheduled": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder token budget",
    "TestEncoder::test_encoder_budget_overflow": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder token budget",
    "TestEncoder::test_encoder_exceeds_budget": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder token budget",
    "TestEncoder::test_encoder_plus_gen": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder token budget",
    "TestEncoder::test_multiple_encoders": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder token budget",
    "TestEncoder::test_encoder_counts_toward_batch": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder token budget",
    "TestEncoder::test_encoder_does_not_touch_kv_pools": "encoder-decoder / cross-attention: kvlab has no ENCODER_INIT requests nor a cross-KV pool",
    "TestEncoder::test_encoder_without_cross_manager_raises": "encoder-decoder / cross-attention: kvlab has no cross_kv_cache_manager to require",
    "TestEncoder::test_encoder_then_context_defers_cross_pool_to_context": "encoder-decoder / cross-attention: kvlab has no ENCODER_INIT requests nor a cross-KV pool",
    "TestEncoder::test_later_context_chunk_reuses_cross_pool_without_resizing": "encoder-decoder / cross-attention: kvlab has no cross-KV pool for later decoder chunks to read",
}
