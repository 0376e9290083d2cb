"""Rendering: exact argv, overlays, multi-node ranks, baselines, and shell quoting that survives anything."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specctl.engines import get_engine
from specctl.flows import static
from specctl.plan.inputs import Inputs
from specctl.plan.plan import OVERLAY_PATH, build_plan
from specctl.plan.render import command_lines, quote, render_json, render_sh
from specctl.profile import Profile
from tests.factory import Scenario, merge

ROOT = Path(__file__).resolve().parents[2]


def test_kimi_overlay_makes_the_engine_capture_the_manifest_layers(hub_env: Path) -> None:
    report = static.check(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", offline=True)
    [overlay] = [f for f in report.findings if f.code == "capture-overlay"]
    assert overlay.values["config_ids"] == [2, 30, 58]
    assert overlay.values["config_captured_layers"] == [1, 29, 57]
    assert overlay.values["needed_layers"] == [2, 30, 58]
    plan = static.plan(report)
    assert plan.overlay is not None
    ids = plan.overlay.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == [3, 31, 59]
    # the overlay's ids, fed back through the same convention, capture the outputs of [2, 30, 58]
    convention = report.inputs.convention
    assert convention is not None and list(convention.capture(ids, 61).captured) == [3, 31, 59]
    argv = plan.nodes[0].argv
    assert argv[argv.index("--speculative-draft-model-path") + 1] == OVERLAY_PATH
    assert "--speculative-draft-model-revision" not in argv
    assert "model-00001-of-00001.safetensors" not in plan.overlay.links and "model.safetensors" in plan.overlay.links


def test_same_ids_under_a_llama_target_need_no_overlay(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.target_config["num_hidden_layers"] = 61
    s.drafter_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    s.manifest = merge(s.manifest, {"target": {"num_hidden_layers": 61}, "capture": {"layers": [2, 30, 58]}})
    report = static.check(s.write())
    assert not [f for f in report.findings if f.severity.value == "error"], report.findings
    plan = static.plan(report)
    assert plan.overlay is None and plan.capture is not None and plan.capture["layers"] == [2, 30, 58]
    argv = plan.nodes[0].argv
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(tmp_path / "drafter")


def test_exact_argv_of_the_llama_example(hub_env: Path) -> None:
    plan = static.plan(static.check(ROOT / "profiles" / "llama-3.1-8b-b200.yaml", offline=True))
    assert plan.nodes[0].argv == (
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--revision",
        "d8be57a14bc73139e4febbd443298aac65ea5315",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
        "--speculative-draft-model-revision",
        "2f9dba266dec8aa73edb4220f83f5d0534b9fc4b",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--tp-size",
        "1",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--enable-metrics",  # engine.metrics (the default): what `specctl watch` reads
        "--mem-fraction-static",
        "0.8",
        "--max-running-requests",
        "64",
        "--dtype",
        "bfloat16",
    )


def test_baseline_drops_speculation_and_render_is_deterministic(hub_env: Path) -> None:
    path = ROOT / "profiles" / "kimi-k2.5-tp8.yaml"
    report = static.check(path, offline=True)
    baseline = static.plan(report, baseline=True)
    assert not any(a.startswith("--speculative") for a in baseline.nodes[0].argv) and baseline.overlay is None
    assert render_json(static.plan(report)) == render_json(static.plan(static.check(path, offline=True)))


def test_multi_node_ranks_share_one_dist_init_address(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(
        s.profile, {"parallel": {"tp": 8, "nnodes": 2}, "hardware": {"gpus_per_node": 4}, "hosts": ["node-a", "node-b"]}
    )
    plan = static.plan(static.check(s.write()))
    assert [n.rank for n in plan.nodes] == [0, 1] and [n.host for n in plan.nodes] == ["node-a", "node-b"]
    for node in plan.nodes:
        argv = list(node.argv)
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == str(node.rank)
        assert argv[argv.index("--dist-init-addr") + 1] == "node-a:50000"


# --- shell injection: every string a profile can carry reaches argv and env as plain data -----------------

TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=30)
# what validate accepts as engine.python: one line, a command on PATH or a path from / or ~/ (quotes, $, `
# and the rest still reach the script)
INTERPRETER = TEXT.filter(
    lambda s: not any(ord(c) < 32 or ord(c) == 127 for c in s) and ("/" not in s or s.startswith(("/", "~/")))
)

# what validate accepts as engine.host: an IP literal or an RFC 1123 host name
ADDRESS = st.ip_addresses().map(str) | st.from_regex(
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,8}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,8}[A-Za-z0-9])?){0,3}", fullmatch=True
)


def joined(script: str) -> str:
    """The script with its ` \\` continuations joined: each command on one line, as the shell reads it."""
    return re.sub(r" \\\n *", " ", script)


def _script_argv(script: str, release: Path) -> tuple[list[str], dict[str, str]]:
    """Run the script with `exec` replaced by printf: the real shell expands every word exactly as it would."""
    probe = script.replace("\nexec ", "\nenv -0 > \"$SPECCTL_PROBE_ENV\"\nprintf '%s\\0' ", 1)
    env_file = release / "env.out"
    result = subprocess.run(
        ["sh", "-c", probe, str(release / "launch.sh")],
        capture_output=True,
        check=True,
        env={"PATH": os.environ["PATH"], "SPECCTL_PROBE_ENV": str(env_file), "SPECCTL_RELEASE_DIR": str(release)},
    )
    argv = result.stdout.decode().split("\0")[:-1]
    env = dict(item.split("=", 1) for item in env_file.read_bytes().decode().split("\0") if "=" in item)
    return argv, env


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=TEXT,
    python=INTERPRETER,
    host=ADDRESS,
    env_value=TEXT,
    arg_value=TEXT,
    drafter=TEXT,
    node=TEXT,
    description=TEXT,
)
def test_no_profile_string_can_inject_shell(
    tmp_path: Path,
    model: str,
    python: str,
    host: str,
    env_value: str,
    arg_value: str,
    drafter: str,
    node: str,
    description: str,
) -> None:
    data: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "metadata": {"name": "x", "version": 1, "description": description},
        "target": {"model": model, "revision": "a" * 40},
        "drafter": {"model": drafter, "revision": "b" * 40, "manifest": "m.yaml"},
        "parallel": {"tp": 2, "nnodes": 2},
        "hardware": {"gpu": "h100", "gpus_per_node": 1},
        "engine": {
            "name": "sglang",
            "version": "0.5.23",
            "python": python,
            "host": host,
            "env": {"SOME_VAR": env_value},
            "args": {"served-model-name": arg_value},
        },
        "hosts": [node, "other"],
    }
    profile = Profile.model_validate(data)
    plan = build_plan(Inputs(profile, "p.yaml", "0" * 64, get_engine("sglang")), None)
    for node_plan in plan.nodes:
        script = render_sh(plan, node_plan)
        assert _printable(script)
        argv, env = _script_argv(script, tmp_path)
        assert argv == list(node_plan.argv)
        assert env["SOME_VAR"] == env_value
    assert plan.nodes[0].argv[plan.nodes[0].argv.index("--dist-init-addr") + 1] == f"{node}:50000"


def _printable(script: str) -> bool:
    """Nothing in the script can act on the terminal that shows it: printable text, newlines and tabs."""
    return all(char.isprintable() or char in "\n\t" for char in script)


# strings dense in what a terminal acts on (C0 and C1 controls, DEL, bidi overrides, line separators),
# mixed with what quoting must keep: newlines (also trailing ones), tabs, quotes, $ and backslashes
CONTROL_TEXT = st.text(
    st.one_of(
        st.characters(whitelist_categories=("Cc", "Cf", "Zl", "Zp"), blacklist_characters="\x00"),
        st.sampled_from(["\n", "\t", "'", '"', "$", "\\", "`", " ", "a", "%", "é"]),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=CONTROL_TEXT, env_value=CONTROL_TEXT, model=CONTROL_TEXT)
def test_control_characters_render_printable_and_run_exactly(
    tmp_path: Path, value: str, env_value: str, model: str
) -> None:
    data: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "metadata": {"name": "x", "version": 1},
        "target": {"model": model, "allow_unpinned": True},
        "hardware": {"gpu": "h100", "gpus_per_node": 1},
        "engine": {
            "name": "sglang",
            "version": "0.5.23",
            "env": {"SOME_VAR": env_value},
            "args": {"served-model-name": value},
        },
    }
    plan = build_plan(Inputs(Profile.model_validate(data), "p.yaml", "0" * 64, get_engine("sglang")), None)
    script = render_sh(plan, plan.nodes[0])
    assert _printable(script), script
    argv, env = _script_argv(script, tmp_path)
    assert argv == list(plan.nodes[0].argv) and argv[argv.index("--served-model-name") + 1] == value
    assert env["SOME_VAR"] == env_value


def test_quote_spells_out_controls_and_keeps_newlines_literal() -> None:
    assert quote("\x1b[31mred\n") == "\"$(printf '\\033')\"'[31mred\n'"
    assert quote("a\u202eb") == "a\"$(printf '\\342\\200\\256')\"b"
    assert quote("plain") == "plain" and quote("") == "''"


def test_the_overlay_path_is_the_only_expansion(tmp_path: Path, hub_env: Path) -> None:
    plan = static.plan(static.check(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", offline=True))
    argv, env = _script_argv(render_sh(plan, plan.nodes[0]), tmp_path)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == f"{tmp_path}/drafter-overlay"
    assert env["NCCL_P2P_DISABLE"] == "1" and "HF_TOKEN" not in env


def test_adaptive_tiers_travel_in_the_release_and_the_launch_script_names_them(tmp_path: Path) -> None:
    from specctl.constants import ADAPTIVE_FILE, ADAPTIVE_PATH, RELEASE_DIR_VAR
    from specctl.release.release import release_files

    s = Scenario(tmp_path)
    s.profile = merge(
        s.profile,
        {
            "speculative": {
                "adaptive": {1: {"candidate_steps": [1, 3]}, 8: {"candidate_steps": [0, 1], "ema_alpha": 0.5}}
            }
        },
    )
    plan = static.plan(static.check(s.write()))
    argv = plan.nodes[0].argv
    assert "--speculative-adaptive" in argv and argv[argv.index("--speculative-adaptive-config") + 1] == ADAPTIVE_PATH
    assert plan.files == {
        ADAPTIVE_FILE: {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1], "ema_alpha": 0.5}}
    }
    files = release_files(plan, plan.nodes[0], {})
    assert ADAPTIVE_FILE in files and b'"candidate_steps"' in files[ADAPTIVE_FILE][0]  # type: ignore[index]
    script = joined(render_sh(plan, plan.nodes[0]))
    assert f'--speculative-adaptive-config "${{{RELEASE_DIR_VAR}}}"/{ADAPTIVE_FILE}' in script
    baseline = static.plan(static.check(s.write()), baseline=True)
    assert "--speculative-adaptive" not in baseline.nodes[0].argv and baseline.files == {}
    built_in = merge(s.profile, {"speculative": {"adaptive": True}})
    s.profile = built_in
    argv = static.plan(static.check(s.write())).nodes[0].argv
    assert "--speculative-adaptive" in argv and "--speculative-adaptive-config" not in argv


def test_metrics_are_served_by_default_once_and_can_be_turned_off(tmp_path: Path) -> None:
    def argv(name: str, **engine: object) -> tuple[str, ...]:
        s = Scenario(tmp_path / name)
        s.profile = merge(s.profile, {"engine": engine})
        return static.plan(static.check(s.write())).nodes[0].argv

    assert argv("default").count("--enable-metrics") == 1
    assert "--enable-metrics" not in argv("off", metrics=False)
    assert argv("by-hand", args={"enable-metrics": True}).count("--enable-metrics") == 1  # not twice


# --- 80 columns: a long command broken before each option, the same argv run ---------------------------


def test_a_long_command_breaks_before_each_option_and_runs_the_same_argv(tmp_path: Path, hub_env: Path) -> None:
    plan = static.plan(static.check(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", offline=True))
    script = render_sh(plan, plan.nodes[0])
    lines = script.splitlines()
    assert max(len(line) for line in lines) <= 80, script
    start = next(i for i, line in enumerate(lines) if line.startswith("exec "))
    assert lines[start] == "exec /opt/sglang/bin/python -m sglang.launch_server \\"
    options = lines[start + 1 :]
    assert "  --revision 1b7bb491f9466d1fc104856557676df00c950b28 \\" in options  # a flag with its value
    assert all(line.startswith("  --") for line in options)
    assert len(options) == sum(word.startswith("--") for word in plan.nodes[0].argv)  # one option a line
    assert all(line.endswith(" \\") for line in options[:-1]) and not options[-1].endswith("\\")
    for shell in ("sh", "bash"):
        if shutil.which(shell):
            checked = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True)
            assert checked.returncode == 0, checked.stderr
    argv, _ = _script_argv(script, tmp_path)
    assert argv == [w.replace("${SPECCTL_RELEASE_DIR}", str(tmp_path)) for w in plan.nodes[0].argv]
    assert joined(script).splitlines()[start] == "exec " + " ".join(quote(w) for w in plan.nodes[0].argv)


def test_command_lines_fit_where_a_break_can_and_keep_every_word_whole() -> None:
    assert command_lines(["sleep", "60"], prefix="exec ") == ["exec sleep 60"]  # short: one line, as before
    long_value = "/models/" + "m" * 90
    argv = ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", long_value, "--port", "1"]
    argv += ["--json-model-override-args", '{"rope_scaling": {"type": "yarn", "factor": 4.0, "original": 32768}}']
    argv += ["--tp-size", "-1", "--enable-metrics", "--nargs", *(f"value-{i}" for i in range(20))]
    lines = command_lines(argv, prefix="exec ")
    assert lines[0] == "exec /usr/bin/python3 -m sglang.launch_server \\"
    assert lines[1:4] == ["  --model-path \\", f"    {long_value} \\", "  --port 1 \\"]  # the value alone, whole
    assert "  --tp-size -1 \\" in lines  # a negative number is a value, not an option
    assert all(len(line) <= 80 for line in lines if long_value not in line), lines
    assert sum(line.startswith("    value-") for line in lines) >= 1  # further values fill the next lines
    job = ["sbatch", "--job-name=specctl:p:<run-id>", "--nodes=1", "--output=/shared/a b/server.log", "--exclusive"]
    assert command_lines(job, width=40) == [  # an option quoted whole is still an option
        "sbatch \\",
        "  '--job-name=specctl:p:<run-id>' \\",
        "  --nodes=1 \\",
        "  '--output=/shared/a b/server.log' \\",
        "  --exclusive",
    ]
    script = "\n".join(lines) + "\n"
    printed = subprocess.run(
        ["sh", "-c", script.replace("exec ", "printf '%s\\0' ", 1)], capture_output=True, check=True
    ).stdout.decode()
    assert printed.split("\0")[:-1] == argv


def test_the_fast_tiers_guard_still_reads_a_broken_launch_command(tmp_path: Path, hub_env: Path) -> None:
    """tests/fakes/engine.py reads the interpreter and module of a release's command over its lines."""
    from tests.fakes.engine import launches_a_real_engine

    plan = static.plan(static.check(ROOT / "profiles" / "llama-3.1-8b-b200.yaml", offline=True))
    node = plan.nodes[0]
    launch = tmp_path / "launch.sh"
    launch.write_text(render_sh(plan, dataclasses.replace(node, argv=(sys.executable, *node.argv[1:]))))
    assert launch.read_text().count(" \\\n") > 5
    assert launches_a_real_engine(launch) == f"{launch} runs {sys.executable} -m sglang.launch_server"
