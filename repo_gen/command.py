"""``generate_llm_model_repo.py`` / ``generate-llm-model-repo``: the seed's generator command, flags as written.

Standard library only, and Python 3.8: the release artifacts run this module under a bare
``python`` (see :mod:`repo_gen.artifacts`). Every bad input ends in one ``error: ...`` line on
stderr (exit code 2; 1 when the disk fails) and nothing written.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from backend_model.contract import compile_config
from backend_model.contract.errors import SessionError
from backend_model.contract.parameters import ENGINES, PRECISIONS, VARIES_WITH_BATCH, precision_label

from . import spec as spec_module
from .samples import SAMPLES
from .writer import MODEL_TYPES, Backend, RepoError

DEFAULT_OUT = "llm_model_dir"
INPUT_ERRORS = (RepoError, compile_config.CompileConfigError, SessionError)


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- help text


def samples_help() -> str:
    lines = ["Samples (a --model_name that is one of them takes its defaults; flags override; the precision",
             "is the CPU engine's, a card runs its QPC):"]
    for name, spec in SAMPLES.items():
        mode = "decoupled (stream)" if spec.decoupled else "batch"
        lines.append(f"  {name:<25} {spec.model_type:<9} {mode:<19} {precision_label(spec.precision):<5} "
                     f"{spec.hf_model_name}")
    return "\n".join(lines)


def _compile_keys_help() -> str:
    lines = ["compile_config.json keys (a key that is absent takes its default):"]
    for key, (_, default, _, rule) in compile_config.SCHEMA.items():
        lines.append(f"  {key:<23} {rule}; default {'none' if default is None else json.dumps(default)}")
    lines += ["full_batch_size turns on continuous batching: a free slot takes the next queued prompt at once;",
              "without it prompts run in batches of batch_size (a short batch is filled with repeats whose output",
              "is dropped; prompts beyond it wait for the next batch). Unknown keys and wrong types are errors."]
    return "\n".join(lines)


EXAMPLES = """Examples (the seed's):
  generate_llm_model_repo.py --model_name mistral_7b --aic_binary_dir <path/to/qpc> \\
      --python_backend_dir /opt/qti-aic/integrations/triton/backends/qaic/qaic_backend_python/
  generate_llm_model_repo.py --model_name my_model --aic_binary_dir <path/to/qpc> \\
      --compile_config_path cfg.json --hf_model_name org/model --model_type kv_cache --decoupled"""


def epilog() -> str:
    return "\n\n".join([EXAMPLES, samples_help(), _compile_keys_help()])


# --------------------------------------------------------------------------- the parser


class _Parser(argparse.ArgumentParser):
    """argparse with one ``error: ...`` line (exit code 2) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        note(f"error: {message}")
        raise SystemExit(2)


def _threads(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return int(text)


def _flag(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> None:
    """``--snake_name`` (the seed's spelling) and ``--kebab-name``."""
    parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", dest=name, **kwargs)


def parser(prog: str, default_output: Path | str, default_backend: Path | None) -> argparse.ArgumentParser:
    backend = default_backend or "the bundled backend"
    p = _Parser(prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog(),
                description="Write <output_dir>/<model_name>/: config.pbtxt, compile_config.json and 1/ (the backend).")
    _flag(p, "model_name", required=True,
          help="Model folder name (letters, digits, '_', '-', '.'); a sample's name takes its defaults, any other "
               "is a custom model: it needs --aic_binary_dir or --hf_model_name.")
    _flag(p, "aic_binary_dir", type=Path,
          help="Compiled QPC folder (holding programqpc.bin); the backend loads it and skips download and compilation.")
    _flag(p, "python_backend_dir", type=Path, help=f"Backend folder (with model.py) copied into <model>/1/. Default: "
          f"{backend}. A folder that is not qaic-console's is copied as it is; its config.pbtxt.tmpl, if any, "
          "writes config.pbtxt.")
    _flag(p, "compile_config_path", type=Path,
          help="compile_config.json to validate and copy into the model folder (replaces a sample's).")
    _flag(p, "hf_model_name", nargs="?", const="", default=None,
          help="Hugging Face model: tokenizer, and compiled when there is no QPC; 'embedded' is the embedded "
               "SmolLM2 (CPU). Given bare (as in the seed's example) it keeps the default: the sample's, else none.")
    _flag(p, "model_type", choices=MODEL_TYPES,
          help="Sets use_kv_cache. Default: the sample's; else read from the QPC; else kv_cache.")
    p.add_argument("--decoupled", action="store_true", default=None,
                   help="Decoupled transaction policy (stream responses, gRPC). Default: the sample's, else batch.")
    p.add_argument("--no-decoupled", "--no_decoupled", dest="decoupled", action="store_false",
                   help="Batch transaction policy (one response per request).")
    p.add_argument("-o", "--output_dir", "--output-dir", dest="output_dir", type=Path, default=Path(default_output),
                   help=f"Model repository to write into (default: {default_output}).")
    p.add_argument("--force", action="store_true", help="Replace an existing model folder.")
    p.add_argument("--engine", choices=ENGINES,
                   help="auto (default): the card when QEfficient is importable, else the CPU. onnx: the card's ONNX "
                        "Runtime twin on the compile config's onnx_path, or on a graph exported into <model>/onnx/ "
                        "(about a minute for the embedded model; needs torch, onnx and onnxruntime).")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="CPU engine weights (default: the sample's, else fp32; fp32 is token-exact with transformers; "
                        "int4 and int8: the Llama family only). " + " ".join(
                            f"{name} {why}." for name, why in VARIES_WITH_BATCH.items()))
    _flag(p, "cpu_threads", type=_threads,
          help="CPU engine: threads for this model. Default 0: automatic, all CPUs but one (left to the server and "
               "its clients) shared by the CPU models the server loads; the model's log line says how many.")
    _flag(p, "device_groups", metavar="QIDS;QIDS",
          help="One model instance per group of Cloud AI 100 SoCs (QIDs as qaic-util -q lists them), e.g. "
               "\"0,1,2,3;4,5,6,7\": two instances of four SoCs each. A group holds the QPC's num_devices SoCs "
               "(compile config num_devices, default 1); checked against qaic-util -q when it is here. Without a "
               "card each instance runs its own CPU engine.")
    p.add_argument("--lora", metavar="NAME=PATH", action="append", default=[],
                   help="A LoRA adapter the model serves (repeatable): PATH is a PEFT adapter folder "
                        "(adapter_config.json, adapter_model.safetensors) of the base model, copied into "
                        "<model>/adapters/NAME/; a request picks it by lora_name. All of one rank and target modules "
                        "among q/k/v/o_proj (QEfficient's finite LoRAX; the compile config lists them).")
    _flag(p, "max_loras", type=_threads,
          help="Adapters one batch mixes (default: all of them).")
    return p


# --------------------------------------------------------------------------- running it


def _os_reason(exc: OSError) -> str:
    """shutil.Error carries a list of (src, dst, why): name the first source, not the temp destination."""
    failures = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(failures, list) and failures and len(failures[0]) == 3:
        src, _, why = failures[0]
        return f"cannot copy {src} ({why})"
    return str(exc)


def generate(args: argparse.Namespace, default_backend: Path | None) -> Path:
    """Write the model the parsed flags describe; the model folder."""
    backend_dir = args.python_backend_dir or default_backend
    spec, written = spec_module.generate(
        args.model_name, args.output_dir, python_backend_dir=backend_dir, force=args.force, note=note,
        aic_binary_dir=args.aic_binary_dir, compile_config_path=args.compile_config_path,
        hf_model_name=args.hf_model_name, model_type=args.model_type, decoupled=args.decoupled, engine=args.engine,
        precision=args.precision, cpu_threads=args.cpu_threads, device_groups=args.device_groups,
        lora_adapters=args.lora, max_loras=args.max_loras)
    if args.hf_model_name == "":
        note(f"note: --hf_model_name given without a value: using {spec.hf_model_name or 'none'}")
    if spec.aic_binary_dir and not spec.hf_model_name:
        note("warning: no --hf_model_name: on a card the backend loads the QPC's tokenizer from it")
    told = Backend(Path(backend_dir) if backend_dir is not None else None).note()
    if told:
        note(told)
    mode = "decoupled" if spec.decoupled else "batch"
    source = spec.aic_binary_dir or spec.hf_model_name or "embedded"
    groups = f", instances {spec.instances} on device groups {spec.device_groups}" if spec.device_groups else ""
    adapters = f", adapters {', '.join(spec.adapters)}" if spec.adapters else ""
    print(f"wrote {written} ({spec.model_type}, {mode}, source {source}{groups}{adapters})", flush=True)
    return written


def main(argv: Sequence[str] | None = None, prog: str = "generate-llm-model-repo",
         default_output: Path | str = DEFAULT_OUT, default_backend: Path | None = None) -> int:
    """Run the command; the exit code (0 written, 2 bad input, 1 the write failed)."""
    args = parser(prog, default_output, default_backend).parse_args(argv)
    try:
        generate(args, default_backend)
    except INPUT_ERRORS as exc:
        note(f"error: {exc}")
        return 2
    except OSError as exc:
        note(f"error: cannot write {args.output_dir / args.model_name}: {' '.join(_os_reason(exc).split())}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
