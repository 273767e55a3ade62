"""Qualcomm's ``generate_llm_model_repo.py``, as qaic-console's release artifacts ship it.

Runs with a bare ``python`` (standard library only; QEfficient only when a QPC must be loaded to
read its model type). The generator is qaic-console's own library, ``repo_gen/`` beside this file;
it writes ``llm_model_dir/`` beside this file, and copies ``../qaic_backend_python/`` (the bundled
backend) into each model unless ``--python_backend_dir`` names another backend folder.

    python generate_llm_model_repo.py --model_name mistral_7b --aic_binary_dir <path/to/qpc> \\
        --python_backend_dir /opt/qti-aic/integrations/triton/backends/qaic/qaic_backend_python/
"""

import sys
from pathlib import Path

from repo_gen.command import main

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.exit(main(prog="generate_llm_model_repo.py", default_output=HERE / "llm_model_dir",
                  default_backend=HERE.parent / "qaic_backend_python"))
