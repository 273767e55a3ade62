"""A Triton Python model of our own that imports vllm: the peer tier's proof that ``serve --python-env`` (or a
model's ``EXECUTION_ENV_PATH``) hosts a model needing another Python environment.

STRING ``prompt`` -> ``text_output``. The config's parameters: ``hf_model`` (a Hugging Face folder) and ``answer``:
``generate`` (greedy, ``max_tokens`` tokens through vLLM's offline engine, ``vllm.LLM``) or ``tokens`` (the
prompt's token ids through vLLM's tokenizer, as JSON).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"])["parameters"].items()}
        self.answer = params["answer"]
        if self.answer == "generate":
            from vllm import LLM, SamplingParams

            self.llm = LLM(model=params["hf_model"], max_model_len=1024)
            self.sampling = SamplingParams(max_tokens=int(params["max_tokens"]), temperature=0)
        else:
            from vllm.tokenizers import get_tokenizer

            self.tokenizer = get_tokenizer(params["hf_model"])

    def execute(self, requests):
        prompts = [pb_utils.get_input_tensor_by_name(r, "prompt").as_numpy().reshape(-1)[0].decode() for r in requests]
        if self.answer == "generate":
            texts = [out.outputs[0].text for out in self.llm.generate(prompts, self.sampling, use_tqdm=False)]
        else:
            texts = [json.dumps(self.tokenizer.encode(prompt)) for prompt in prompts]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([t.encode()], dtype=object))])
                for t in texts]
