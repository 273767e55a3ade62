"""The names the OpenAI front publishes its models' figures under on its ``/metrics`` (vLLM's, with vLLM's meaning),
so the tools that read vLLM's page read the front's: the front maps the backend's families to them
(``console.front.metrics_route``), the fleet's endpoint picker is told to read them (``console.fleet.pool``)."""

from __future__ import annotations

VLLM_NAMES = {  # the backend's family -> vLLM's (families as the parser names them: a counter without _total)
    "qaic_num_requests_running": "vllm:num_requests_running",
    "qaic_num_requests_waiting": "vllm:num_requests_waiting",
    "qaic_kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "qaic_prompt_tokens": "vllm:prompt_tokens",
    "qaic_generation_tokens": "vllm:generation_tokens",
    "qaic_request_success": "vllm:request_success",
    "qaic_request_queue_time_seconds": "vllm:request_queue_time_seconds",
    "qaic_time_to_first_token_seconds": "vllm:time_to_first_token_seconds",
    "qaic_time_per_output_token_seconds": "vllm:time_per_output_token_seconds",
}
LORA_INFO = "vllm:lora_requests_info"  # the LoRA adapters served and waiting (the front's own, from its models)
