"""Reading tritonserver's log: the condensed view the consoles show, and how a stop they asked for ended."""

from __future__ import annotations

from console.server import logparse

RAW = [  # as tritonserver 2.51 writes them (cut), with the console's own lines among them
    logparse.NOISE_NOTE,
    "starting tritonserver on /tmp/repo ...",
    'I1201 16:37:40.269022 26930 model_lifecycle.cc:472] "loading: smollm2_decoupled:1"',
    'I1201 16:37:42.048902 26930 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: smollm2_decoupled_0_0"',
    'I1201 16:38:02.751380 26930 triton_model.py:33] "smollm2_decoupled: engine=cpu model=embedded type=kv_cache"',
    'W1201 16:38:02.752000 26930 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory"',
    "I1201 16:38:02.758666 26930 server.cc:631] ",
    "+---------+----------------------------------------------+",
    "| Backend | Path                                         |",
    "+---------+----------------------------------------------+",
    "",
    'I1201 16:38:02.761397 26930 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:33931"',
    'E1201 16:38:03.000000 26930 model_lifecycle.cc:654] "failed to load \'bad\' version 1: Invalid argument: '
    'x\\nmore"',
    'I1201 16:38:03.938806 26930 server.cc:336] "All models are stopped, unloading models"',
    'I1201 16:38:03.938810 26930 server.cc:345] "Timeout 3: Found 1 live models and 0 in-flight non-inference '
    'requests"',
    'E1201 16:38:06.939335 26930 main.cc:535] "failed to stop server: Internal - Exit timeout expired. Exiting '
    'immediately."',
]


def test_the_condensed_log_keeps_what_matters_without_tables_or_noise() -> None:
    shown = [line for line in map(logparse.condensed, RAW[1:]) if line is not None]
    assert shown == [
        "starting tritonserver on /tmp/repo ...",  # the console's own lines stay as they are
        "16:37:40 loading: smollm2_decoupled:1",
        "16:38:02 smollm2_decoupled: engine=cpu model=embedded type=kv_cache",  # the backend's own
        "16:38:02 Started GRPCInferenceService at 127.0.0.1:33931",
        "16:38:03 error: failed to load 'bad' version 1: Invalid argument: x",  # its first line
        "16:38:03 All models are stopped, unloading models",
    ]  # nor Triton's "Exit timeout expired. Exiting immediately.": a normal stop's end, which the console says
    assert logparse.condensed(RAW[0]) == logparse.NOISE_NOTE  # the views drop or caption it themselves
    assert [logparse.startup_line(line) for line in RAW[2:5]] == [
        "loading: smollm2_decoupled:1", None, "smollm2_decoupled: engine=cpu model=embedded type=kv_cache"]


def test_a_stop_that_ran_past_the_exit_timeout_is_a_normal_stop() -> None:
    assert logparse.stop_note(0, RAW) == "" and logparse.stop_note(None, []) == ""
    assert logparse.stop_note(-9, RAW) == "", "killed after Triton's exit timeout ran out: stopped as asked"
    assert logparse.stop_note(1, RAW) == ""
    assert logparse.stop_note(-9, RAW[:5]) == " (exit code -9)"


def test_a_port_taken_is_read_from_the_log_of_either_service() -> None:
    taken = ['E1203 13:33:14.334941 25069 main.cc:257] "failed to start HTTP service: Unavailable - Socket '
             '\'127.0.0.1:59265\' already in use "',
             'E1203 13:33:14.377589 25093 main.cc:245] "failed to start GRPC service: Unavailable - Socket '
             '\'127.0.0.1:59265\' already in use "']  # as tritonserver 2.51 writes them
    assert all(logparse.port_taken(RAW + [line]) for line in taken)
    assert not logparse.port_taken(RAW)
