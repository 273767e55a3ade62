"""The repo generator: samples, the seed's commands as written, bad inputs, atomic writes, listing, serving."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from backend_model.contract import compile_config
from backend_model.contract.qpc import DETECT_MESSAGE
from console.cli import main as console_main
from console.commands.repo import gen, repo_group
from repo_gen import staging
from repo_gen.inspection import inspect_model, list_models
from repo_gen.samples import EMBEDDED_ALL, EMBEDDED_EMBEDDING, EMBEDDED_SAMPLES, SAMPLES, SEED_SAMPLES, write_samples
from repo_gen.writer import PRECISIONS, ModelSpec, RepoError, write_model

SEED_BACKEND = "/opt/qti-aic/integrations/triton/backends/qaic/qaic_backend_python/"
EMBEDDED = ("--hf_model_name", "embedded")  # what a custom model loads on the CPU when nothing else is given


# --------------------------------------------------------------------------- helpers


def run(args: list[str], cli=repo_group) -> Result:
    """Invoke a CLI; any exception other than a clean exit fails the test with its traceback."""
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def assert_error(result: Result, *needles: str) -> str:
    """Exit code 1 or 2 and exactly one ``error: ...`` line, the last on stderr, naming the problem."""
    assert result.exit_code in (1, 2), result.output
    lines = result.stderr.splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[-1]
    return lines[-1]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (hidden ones too) with file contents: a before/after snapshot."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def config_of(model_dir: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def params_of(model_dir: Path) -> dict[str, str]:
    return {k: v.string_value for k, v in config_of(model_dir).parameters.items()}


@pytest.fixture
def qpc(tmp_path: Path) -> Path:
    """A stand-in QPC in QEfficient's layout: <dir>/qpcs/programqpc.bin (no model type information)."""
    root = tmp_path / "qpc"
    (root / "qpcs").mkdir(parents=True)
    (root / "qpcs" / "programqpc.bin").write_bytes(b"\0QPC")
    return root


@pytest.fixture
def backend_dir(tmp_path: Path) -> Path:
    """A --python_backend_dir: a backend folder with model.py and a helper module."""
    root = tmp_path / "qaic_backend_python"
    root.mkdir()
    (root / "model.py").write_text("# stand-in for Qualcomm's backend\n")
    (root / "helper.py").write_text("X = 1\n")
    return root


def specializations(folder: Path, *entries: dict[str, str]) -> None:
    (folder / "specializations.json").write_text(json.dumps({"specializations": list(entries)}))


# --------------------------------------------------------------------------- samples


@pytest.mark.parametrize("name", list(SAMPLES))
def test_each_sample_generates(tmp_path: Path, name: str) -> None:
    sample = SAMPLES[name]
    result = run(["gen", "--model_name", name, "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / name
    config = config_of(folder)
    assert (config.name, config.backend) == (name, "python")
    assert config.model_transaction_policy.decoupled is sample.decoupled
    params = params_of(folder)
    if sample.embedding:  # an encoder: its task, no KV cache
        assert (params["task"], "use_kv_cache" in params) == ("embedding", False)
    else:
        assert params["use_kv_cache"] == ("false" if sample.model_type == "causal" else "true")
    assert params["hf_model_name"] == sample.hf_model_name
    assert json.loads((folder / "compile_config.json").read_text()) == sample.compile
    assert (folder / "1" / "model.py").is_file()
    assert (folder / "1" / "backend_model" / "contract" / "compile_config.py").is_file()  # self-contained backend copy
    assert not list((folder / "1").rglob("__pycache__"))
    assert inspect_model(folder).valid


def test_samples_command_writes_seed_then_embedded_then_vision(tmp_path: Path) -> None:
    assert run(["samples", "-o", str(tmp_path)]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SEED_SAMPLES)
    assert run(["samples", "--embedded", "-o", str(tmp_path)]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SEED_SAMPLES + EMBEDDED_ALL)
    assert run(["samples", "--vision", "-o", str(tmp_path)]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SAMPLES)


def test_samples_command_refuses_existing_and_writes_none(tmp_path: Path) -> None:
    (tmp_path / "mistral_7b").mkdir()
    before = tree(tmp_path)
    assert_error(run(["samples", "-o", str(tmp_path)]), "mistral_7b", "already exists", "--force")
    assert tree(tmp_path) == before
    assert run(["samples", "-o", str(tmp_path), "--force"]).exit_code == 0
    assert inspect_model(tmp_path / "mistral_7b").valid


def test_cli_writes_what_the_server_loaded(tmp_path: Path, embedded_repo: Path) -> None:
    """`repo samples --embedded` writes byte-for-byte the repository the session's tritonserver loads."""
    assert run(["samples", "--embedded", "-o", str(tmp_path)]).exit_code == 0
    for name in EMBEDDED_SAMPLES:
        for file in ("config.pbtxt", "compile_config.json", "1/model.py"):
            assert (tmp_path / name / file).read_bytes() == (embedded_repo / name / file).read_bytes()


# --------------------------------------------------------------------------- the seed's commands as written


def test_seed_sample_command_as_written(tmp_path: Path, qpc: Path, backend_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model_name mistral_7b --aic_binary_dir <qpc> --python_backend_dir <dir>` into ./llm_model_dir."""
    monkeypatch.chdir(tmp_path)
    result = run(["--model_name", "mistral_7b", "--aic_binary_dir", "qpc", "--python_backend_dir",
                  str(backend_dir)], cli=gen)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "llm_model_dir" / "mistral_7b"
    assert "wrote llm_model_dir/mistral_7b" in result.stdout
    assert DETECT_MESSAGE not in result.stderr  # a sample's type is known: the QPC is not loaded
    params = params_of(folder)
    assert params["aic_binary_dir"] == str(qpc)  # absolute, whatever the server's working directory
    assert params["use_kv_cache"] == "true"
    assert params["hf_model_name"] == SAMPLES["mistral_7b"].hf_model_name
    assert not config_of(folder).model_transaction_policy.decoupled
    assert json.loads((folder / "compile_config.json").read_text()) == SAMPLES["mistral_7b"].compile
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["helper.py", "model.py"]  # the given backend
    assert (folder / "1" / "model.py").read_text() == (backend_dir / "model.py").read_text()


def test_seed_custom_command_as_written(tmp_path: Path, qpc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's custom example, bare `--hf_model_name` included."""
    monkeypatch.chdir(tmp_path)
    seed_config = {"num_cores": 16, "prefill_seq_len": 32, "ctx_len": 256, "full_batch_size": 3, "mxfp6_matmul": True}
    (tmp_path / "compile_config.json").write_text(json.dumps(seed_config))
    result = run(["--model_name", "custom_model", "--aic_binary_dir", str(qpc), "--compile_config_path",
                  "compile_config.json", "--hf_model_name", "--model_type", "causal", "--decoupled"], cli=gen)
    assert result.exit_code == 0, result.output
    assert "--hf_model_name given without a value" in result.stderr
    folder = tmp_path / "llm_model_dir" / "custom_model"
    assert config_of(folder).model_transaction_policy.decoupled
    params = params_of(folder)
    assert (params["use_kv_cache"], params["hf_model_name"], params["aic_binary_dir"]) == ("false", "", str(qpc))
    assert json.loads((folder / "compile_config.json").read_text()) == seed_config  # copied as given
    info = inspect_model(folder)
    assert info.valid and info.compile["full_batch_size"] == 3  # continuous batching


def test_flags_override_sample_defaults(tmp_path: Path) -> None:
    result = run(["gen", "--model_name", "mistral_decoupled", "--model_type", "causal", "--no-decoupled",
                  "--hf_model_name", "org/other", "--engine", "cpu", "--precision", "bf16", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "mistral_decoupled"
    assert not config_of(folder).model_transaction_policy.decoupled
    params = params_of(folder)
    assert {k: params[k] for k in ("use_kv_cache", "hf_model_name", "engine", "precision")} == {
        "use_kv_cache": "false", "hf_model_name": "org/other", "engine": "cpu", "precision": "bf16"}


def test_custom_model_defaults(tmp_path: Path) -> None:
    """No sample, no QPC: the template's defaults, kv_cache, batch, empty compile config (backend defaults)."""
    assert run(["gen", "--model_name", "my.model-1", *EMBEDDED, "-o", str(tmp_path)]).exit_code == 0
    folder = tmp_path / "my.model-1"
    params = params_of(folder)
    assert (params["use_kv_cache"], params["engine"], params["precision"]) == ("true", "auto", "fp32")
    assert json.loads((folder / "compile_config.json").read_text()) == {}
    assert inspect_model(folder).compile == compile_config.validate({})


@pytest.mark.parametrize(("args", "guess"), [
    (["--model_name", "mistral_7B"], "did you mean mistral_7b?"),
    (["--model_name", "smollm2-decoupled"], "did you mean smollm2_decoupled?"),
    (["--model_name", "my_model"], "the samples are in --help"),
    (["--model_name", "my_model", "--hf_model_name"], "the samples are in --help"),  # bare: no model given
    (["--model_name", "my_model", "--engine", "onnx"], "the samples are in --help"),  # no graph named
])
def test_a_name_that_is_not_a_sample_needs_something_to_load(tmp_path: Path, args: list[str], guess: str) -> None:
    """A typo of a sample's name used to write an embedded SmolLM2 model without a word."""
    out = tmp_path / "out"
    line = assert_error(run(["gen", *args, "-o", str(out)]), f"is not a sample ({guess})")
    assert "needs --aic_binary_dir <path/to/qpc> or --hf_model_name <org/model>" in line
    assert not out.exists()


def test_a_custom_model_named_like_a_sample_is_written_with_a_note(tmp_path: Path) -> None:
    result = run(["gen", "--model_name", "Mistral_7b", "--hf_model_name", "org/m", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "note: Mistral_7b is not a sample (did you mean mistral_7b?): writing a custom model" in result.stderr
    assert params_of(tmp_path / "Mistral_7b")["hf_model_name"] == "org/m"


@pytest.mark.parametrize(("where", "entries", "expected"), [
    ("above", [{"batch_size": "1", "seq_len": "32", "ctx_len": "256"},
               {"batch_size": "1", "seq_len": "1", "ctx_len": "256"}], "kv_cache"),
    ("beside", [{"batch_size": "1", "seq_len": "32", "ctx_len": "256"}], "kv_cache"),
    ("above", [{"batch_size": "1", "seq_len": "128"}], "causal"),
])
def test_model_type_from_specializations(tmp_path: Path, qpc: Path, where: str, entries: list, expected: str) -> None:
    specializations(qpc if where == "above" else qpc / "qpcs", *entries)
    result = run(["gen", "--model_name", "custom", "--aic_binary_dir", str(qpc), "--hf_model_name", "org/m",
                  "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert DETECT_MESSAGE in result.stderr
    expected_kv = "true" if expected == "kv_cache" else "false"
    assert params_of(tmp_path / "out" / "custom")["use_kv_cache"] == expected_kv


def test_model_type_undeterminable_is_an_error(tmp_path: Path, qpc: Path) -> None:
    out = tmp_path / "out"
    result = run(["gen", "--model_name", "custom", "--aic_binary_dir", str(qpc), "-o", str(out)])
    assert DETECT_MESSAGE in result.stderr
    assert_error(result, "pass --model_type")
    assert not out.exists()


def test_console_script_runs_seed_command(tmp_path: Path, qpc: Path, backend_dir: Path) -> None:
    script = Path(sys.executable).parent / "generate-llm-model-repo"
    if not script.is_file():
        pytest.skip("console script not installed: run `pip install -e . --no-deps`")
    cmd = [str(script), "--model_name", "mistral_7b", "--aic_binary_dir", str(qpc),
           "--python_backend_dir", str(backend_dir)]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "llm_model_dir" / "mistral_7b" / "1" / "model.py").is_file()
    bad = subprocess.run([*cmd[:2], "../x"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (bad.returncode, bad.stderr.count("\n"), bad.stderr.startswith("error: unsafe model name")) == (2, 1, True)


def test_help_everywhere_documents_defaults() -> None:
    for args in (["repo", "--help"], ["repo", "gen", "--help"], ["repo", "samples", "--help"],
                 ["repo", "list", "--help"]):
        result = run(args, cli=console_main)  # laid out as every click command's, repo gen's argparse flags too
        assert result.exit_code == 0 and result.stdout.startswith(f"Usage: main {' '.join(args[:-1])} ")
        assert "\nOptions:\n" in result.stdout and "\n  -h, --help " in result.stdout
    text = run(["repo", "gen", "--help"], cli=console_main).stdout
    assert "  --model_name, --model-name MODEL_NAME" in text and "  --engine [auto|qaic|cpu|onnx]" in text
    samples = " ".join(run(["repo", "samples", "--help"], cli=console_main).stdout.split())
    assert "The seed is Qualcomm's Triton example" in samples and "four sample models" in samples
    assert all(key in text for key in compile_config.SCHEMA)
    assert "full_batch_size turns on continuous batching" in text
    assert all(name in text for name in SAMPLES)


# --------------------------------------------------------------------------- bad inputs


BAD_NAMES = ["../x", "a/b", "..", "", "-x", "/abs", "a\\b", "x\n", "a..b", ".hidden", "x" * 129]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_unsafe_names_rejected(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    assert_error(run(["gen", f"--model_name={name}", "-o", str(out)]), "unsafe model name")  # =: "-x" is a value
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("raw", "needles"), [
    ('{"foo": 1}', ("unknown key 'foo' (supported: onnx_path,",)),
    ('{"ctx_length": 256}', ("unknown key 'ctx_length' (did you mean 'ctx_len'? supported: ",)),
    ('{"Full-Batch-Size": 4}', ("unknown key 'Full-Batch-Size' (did you mean 'full_batch_size'? supported: ",)),
    ('{"ctx_len": "256"}', ("'ctx_len'", "'256'")),
    ('{"ctx_len": true}', ("'ctx_len'",)),
    ('{"batch_size": true}', ("'batch_size'",)),
    ('{"mxfp6_matmul": 1}', ("'mxfp6_matmul'",)),
    ('{"num_cores": 17}', ("'num_cores'",)),
    ('{"prefill_seq_len": 64, "ctx_len": 32}', ("'prefill_seq_len'",)),
    ('[1, 2]', ("JSON object",)),
    ('{"ctx_len": 256,}', ("not valid JSON",)),
])
def test_bad_compile_config_rejected(tmp_path: Path, raw: str, needles: tuple[str, ...]) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(raw)
    out = tmp_path / "out"
    assert_error(run(["gen", "--model_name", "m", "--compile_config_path", str(cfg), "-o", str(out)]), *needles)
    assert not out.exists()


@pytest.mark.parametrize(("args", "needles"), [
    (["--aic_binary_dir", "{tmp}/missing"], ("--aic_binary_dir", "does not exist")),
    (["--aic_binary_dir", "{tmp}/empty"], ("--aic_binary_dir", "not a compiled QPC")),
    (["--compile_config_path", "{tmp}/missing.json"], ("missing.json", "no such file")),
    (["--python_backend_dir", "{tmp}/empty"], ("--python_backend_dir", "no model.py")),
    (["--model_type", "encoder"], ("--model_type", "encoder")),
    (["--engine", "gpu"], ("--engine", "gpu")),
    (["--precision", "fp8"], ("--precision", "fp8")),
    (["--bogus"], ("--bogus",)),
])
def test_bad_flags_rejected(tmp_path: Path, args: list[str], needles: tuple[str, ...]) -> None:
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert_error(run(["gen", "--model_name", "m", "-o", str(out), *args]), *needles)
    assert not out.exists()


def test_missing_model_name_rejected(tmp_path: Path) -> None:
    assert_error(run(["gen", "-o", str(tmp_path / "out")]), "--model_name")
    assert not (tmp_path / "out").exists()


def test_existing_model_needs_force(tmp_path: Path) -> None:
    assert run(["gen", "--model_name", "smollm2_kv", "-o", str(tmp_path)]).exit_code == 0
    before = tree(tmp_path)
    result = run(["gen", "--model_name", "smollm2_kv", "--decoupled", "-o", str(tmp_path)])
    assert_error(result, "smollm2_kv", "already exists", "--force")
    assert tree(tmp_path) == before
    assert run(["gen", "--model_name", "smollm2_kv", "--decoupled", "--force", "-o", str(tmp_path)]).exit_code == 0
    assert config_of(tmp_path / "smollm2_kv").model_transaction_policy.decoupled
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smollm2_kv"]  # no leftover temp or old folders


# --------------------------------------------------------------------------- atomic writes


def test_failure_mid_write_leaves_nothing(tmp_path: Path) -> None:
    """The writer fails inside its temp folder (backend dir without model.py): no folder, no temp dir."""
    empty = tmp_path / "not_a_backend"
    empty.mkdir()
    out = tmp_path / "repo"
    with pytest.raises(RepoError, match="no model.py"):
        write_model(SAMPLES["smollm2_kv"], out, python_backend_dir=str(empty))
    assert not out.exists()  # the output folder it created is gone too
    out.mkdir()
    with pytest.raises(RepoError, match="no model.py"):
        write_model(SAMPLES["smollm2_kv"], out, python_backend_dir=str(empty))
    assert list(out.iterdir()) == []


def test_copy_failure_through_cli_leaves_nothing(tmp_path: Path, backend_dir: Path) -> None:
    """A backend file that cannot be copied (dangling symlink) fails after config.pbtxt is written."""
    os.symlink(tmp_path / "nowhere", backend_dir / "dangling.py")
    out = tmp_path / "out"
    out.mkdir()
    assert_error(run(["gen", "--model_name", "m", *EMBEDDED, "--python_backend_dir", str(backend_dir), "-o",
                      str(out)]), "dangling.py")
    assert list(out.iterdir()) == []


def test_failed_force_keeps_the_old_model(tmp_path: Path, backend_dir: Path) -> None:
    assert run(["gen", "--model_name", "m", *EMBEDDED, "-o", str(tmp_path / "out")]).exit_code == 0
    before = tree(tmp_path / "out")
    os.symlink(tmp_path / "nowhere", backend_dir / "dangling.py")
    result = run(["gen", "--model_name", "m", *EMBEDDED, "--force", "--python_backend_dir", str(backend_dir),
                  "-o", str(tmp_path / "out")])
    assert_error(result)
    assert tree(tmp_path / "out") == before


def dead_pid() -> int:
    """The pid of a process that has exited."""
    done = subprocess.Popen([sys.executable, "-c", ""])
    done.wait()
    return done.pid


def test_the_next_write_sweeps_what_killed_writes_left_and_puts_a_moved_model_back(tmp_path: Path) -> None:
    """Holders of writers that are gone are removed, a model one had moved aside goes back; a live writer's
    holder and a hidden folder that is not a holder stay. ``repo list`` names every hidden folder."""
    write_samples(("smollm2_kv", "smollm2_decoupled"), tmp_path)
    pid = dead_pid()
    moved = tmp_path / f"{staging.HOLDER}-{pid}-smollm2_kv-abcd_123"  # killed between its two renames
    moved.mkdir()
    os.replace(tmp_path / "smollm2_kv", moved / staging.OLD)
    half = tmp_path / f"{staging.HOLDER}-{pid}-smollm2_decoupled-zz00zz00"  # killed while staging
    (half / staging.STAGED / "1").mkdir(parents=True)
    live = staging.holder(tmp_path, "smollm2_causal")  # this process's: a write in progress
    (tmp_path / ".git").mkdir()

    listed = run(["list", str(tmp_path)])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["smollm2_decoupled"]
    notes = listed.stderr.splitlines()
    assert notes == [f"note: ignored {line}" for line in staging.leftovers(tmp_path)] and len(notes) == 4
    assert ".git: a hidden folder, not loaded" in notes[0]
    assert f"{moved.name}: left by a killed generator run; it holds smollm2_kv" in listed.stderr
    assert f"{half.name}: left by a killed generator run, not loaded" in listed.stderr
    assert staging.model_names(tmp_path) == ["smollm2_decoupled"]

    said: list[str] = []
    write_model(SAMPLES["smollm2_decoupled_fp32"], tmp_path, progress=said.append)
    assert f"note: put back {tmp_path / 'smollm2_kv'}, which a killed --force had moved aside into {moved.name}" \
        in said
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        ".git", live.name, "smollm2_decoupled", "smollm2_decoupled_fp32", "smollm2_kv"])
    assert inspect_model(tmp_path / "smollm2_kv").valid and params_of(tmp_path / "smollm2_kv")["precision"] == "int4"


def test_writer_rejects_bad_specs(tmp_path: Path) -> None:
    for spec, needle in ((ModelSpec("m", engine="gpu"), "--engine"), (ModelSpec("m", precision="fp8"), "--precision"),
                         (ModelSpec("m", model_type="seq2seq"), "--model_type"),
                         (ModelSpec("m", aic_binary_dir=str(tmp_path / "none")), "--aic_binary_dir")):
        with pytest.raises(RepoError, match=needle):
            write_model(spec, tmp_path / "out")
    with pytest.raises(RepoError, match="unknown sample"):
        write_samples(("nope",), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_precisions_match_the_cpu_engine() -> None:
    from backend_model.sessions.cpu import DTYPES

    assert set(PRECISIONS) == set(DTYPES)


def test_generated_folders_are_not_private(tmp_path: Path) -> None:
    """The temp folder is private (mkdtemp); the model folder renamed from it gets the umask's mode."""
    assert run(["gen", "--model_name", "m", *EMBEDDED, "-o", str(tmp_path)]).exit_code == 0
    (tmp_path / "reference").mkdir()
    assert (tmp_path / "m").stat().st_mode == (tmp_path / "reference").stat().st_mode


# --------------------------------------------------------------------------- repo list


def test_list_shows_generated_models(tmp_path: Path, qpc: Path) -> None:
    repo = tmp_path / "repo"
    write_samples(EMBEDDED_SAMPLES, repo)
    run(["gen", "--model_name", "mistral_7b", "--aic_binary_dir", str(qpc), "-o", str(repo)])
    (repo / ".m.abc123").mkdir()  # an interrupted write's temp folder is not a model
    result = run(["list", str(repo)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "TYPE", "MODES", "COMPILE", "PRECISION", "SOURCE", "VALID"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert sorted(rows) == sorted([*EMBEDDED_SAMPLES, "mistral_7b"])
    assert rows["smollm2_decoupled"].split()[1:3] == ["kv_cache", "stream+batch"]
    assert rows["smollm2_kv"].split()[1:3] == ["kv_cache", "batch"]
    assert "ctx=512 prefill=32 fbs=8" in rows["smollm2_kv"] and rows["smollm2_kv"].split()[6] == "int4"
    assert " int4 " in rows["smollm2_decoupled"] and " fp32 " in rows["smollm2_decoupled_fp32"]
    assert rows["smollm2_causal"].split()[1:5] == ["causal", "(slow", "on", "CPU)"]  # said where users pick
    assert f"qpc {qpc}" in rows["mistral_7b"] and "embedded" in rows["smollm2_kv"]
    assert all(row.endswith("yes") for row in rows.values())


def test_list_default_dir_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(["samples"]).exit_code == 0
    models = json.loads(run(["list", "--json"]).stdout)
    assert [m["name"] for m in models] == sorted(SEED_SAMPLES)
    starcoder = models[[m["name"] for m in models].index("starcoder_decoupled")]
    assert (starcoder["model_type"], starcoder["decoupled"], starcoder["valid"]) == ("causal", True, True)
    assert starcoder["source"] == "hf bigcode/starcoder"
    assert starcoder["compile"] == compile_config.validate(SAMPLES["starcoder_decoupled"].compile)


def test_list_reports_broken_models(tmp_path: Path) -> None:
    write_samples(("smollm2_kv", "smollm2_causal", "smollm2_decoupled"), tmp_path)
    (tmp_path / "smollm2_kv" / "compile_config.json").write_text('{"ctx_len": "big"}')
    (tmp_path / "smollm2_causal" / "1" / "model.py").unlink()
    (tmp_path / "smollm2_decoupled" / "config.pbtxt").write_text('backend: "onnxruntime"\nname: "other"\n')
    (tmp_path / "junk").mkdir()
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "config.pbtxt").write_text("backend: python {{{")
    models = {m.name: m for m in list_models(tmp_path)}
    assert "'ctx_len'" in models["smollm2_kv"].problems[0]
    assert models["smollm2_causal"].problems == ["no 1/model.py"]
    problems = " ".join(models["smollm2_decoupled"].problems)
    assert "not 'python'" in problems and "folder name" in problems and "use_kv_cache" in problems
    assert "no config.pbtxt" in models["junk"].problems
    assert "does not parse" in models["garbled"].problems[0]
    result = run(["list", str(tmp_path)])
    assert result.exit_code == 1  # a script can tell a broken repository
    assert "no: no 1/model.py" in result.stdout
    assert result.stderr.startswith("error: 5 of 5 models would not load: garbled, junk, smollm2_causal")


def test_list_missing_or_empty_dir(tmp_path: Path) -> None:
    assert_error(run(["list", str(tmp_path / "none")]), "no model repository")
    assert run(["list", str(tmp_path)]).stdout.strip() == f"no models in {tmp_path}"


def test_cpu_threads_reach_the_engine_settings(tmp_path: Path) -> None:
    from backend_model.build import BackendSettings
    from backend_model.sessions.protocol import SessionError

    result = run(["gen", "--model_name", "threaded", *EMBEDDED, "--cpu_threads", "1", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    config = (tmp_path / "threaded" / "config.pbtxt").read_text()
    assert 'key: "cpu_threads" value: { string_value: "1" }' in config
    assert BackendSettings.from_model_dir(tmp_path / "threaded", {"cpu_threads": "1"}).cpu_threads == 1
    with pytest.raises(SessionError, match="cpu_threads"):
        BackendSettings.from_model_dir(tmp_path / "threaded", {"cpu_threads": "-2"})
    assert_error(run(["gen", "--model_name", "x", "--cpu_threads", "-1", "-o", str(tmp_path)]), "cpu_threads")


@pytest.mark.parametrize("kind", ["device", "fifo", "oversized", "folder"])
def test_compile_config_must_be_a_small_regular_file(tmp_path: Path, kind: str) -> None:
    """/dev/zero, a FIFO no one writes to, a big file and a folder each fail at once in one line (a real
    generator process: a hang or an endless read would time out)."""
    path = {"device": Path("/dev/zero"), "fifo": tmp_path / "fifo", "oversized": tmp_path / "big.json",
            "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "oversized":
        path.write_text('{"ctx_len": 256}' + " " * compile_config.MAX_BYTES)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "repo_gen.command", "--model_name", "smollm2_kv",
                           "--compile_config_path", str(path), "-o", str(out)], capture_output=True, text=True,
                          timeout=60)
    what = {"device": "is a device", "fifo": "is a FIFO", "oversized": "is over 65536 bytes", "folder": "is a folder"}
    assert done.returncode == 2 and done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(f"error: {path} {what[kind]}"), done.stderr
    assert not out.exists()


def test_list_reads_no_compile_config_that_is_not_a_small_file(tmp_path: Path) -> None:
    write_samples(("smollm2_kv",), tmp_path)
    config = tmp_path / "smollm2_kv" / "compile_config.json"
    config.unlink()
    os.mkfifo(config)  # reading it would block forever
    (found,) = list_models(tmp_path)
    assert found.problems == ["compile_config.json is a FIFO: only a regular file is read"]


def test_the_readme_names_every_embedded_sample() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(line for line in readme.splitlines() if "repo samples --embedded" in line)
    stem, names = re.search(r"# (\w+?)_\{([^}]*)\}", line).groups()
    assert sorted(f"{stem}_{name}" for name in names.split(",")) == sorted(EMBEDDED_SAMPLES)
    assert all(name in line for name in EMBEDDED_EMBEDDING)  # and the embedding model beside the chat ones
