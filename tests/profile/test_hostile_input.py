"""Hostile and broken input files: each is a positioned input error (exit 2), never a hang, an OOM or a crash."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import DocumentError
from specctl.profile import load_manifest, load_profile
from specctl.profile._files import MAX_DOCUMENT_BYTES, read_bounded
from specctl.profile._yaml import MAX_ALIAS_NODES, MAX_PROBLEMS, parse_yaml
from tests.profile.test_document import GOOD, write

HEADER = "apiVersion: specctl/v1\nkind: Profile\n"


def problems(cli: Any, *args: str) -> list[dict[str, Any]]:
    """Run a command with --json and return the problems of its (single) exit-2 error."""
    result = cli("--json", *args)
    assert result.code == 2, (result.stdout, result.stderr)
    data = result.json()
    if "files" in data:  # validate reports per file
        return [p for f in data["files"] for p in f["problems"]]
    return list(data["error"]["problems"])


def one_problem(cli: Any, *args: str) -> dict[str, Any]:
    [problem] = problems(cli, *args)
    return problem


# --- unbounded input ---------------------------------------------------------------------------------------


def billion_laughs(levels: int = 9) -> str:
    lines = [HEADER.rstrip("\n"), 'a: &a ["x","x","x","x","x","x","x","x","x"]']
    previous = "a"
    for name in "bcdefghijklmnop"[: levels - 1]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_quickly_at_the_alias(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, billion_laughs())
    assert path.stat().st_size < 500
    started = time.monotonic()
    p = one_problem(cli, "validate", str(path))
    assert time.monotonic() - started < 5
    assert p["file"] == str(path) and "aliases are limited" in p["message"] and str(MAX_ALIAS_NODES) in p["message"]
    assert p["line"] == 7 and p["field"].startswith("e.")  # e: the first level whose expansion passes the budget


def test_modest_aliases_and_merge_keys_still_work(tmp_path: Path) -> None:
    text = (
        GOOD.replace(
            'engine:\n  name: sglang\n  version: "0.5.23"\n',
            'engine:\n  <<: &engine {name: sglang, version: "0.5.23"}\n  env: {A: "1"}\n',
        )
        + "hosts: &hosts [a, b]\n"
    )
    loaded = load_profile(write(tmp_path, text))
    assert loaded.model.engine.name == "sglang" and loaded.model.engine.env == {"A": "1"}
    assert loaded.positions[("engine", "env")].line == 16


def test_recursive_anchor_is_refused(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "metadata: &m {name: x, again: *m}\n")
    p = one_problem(cli, "validate", str(path))
    assert (p["file"], p["line"], p["field"]) == (str(path), 3, "metadata.again") and "recursive alias" in p["message"]


def test_deep_nesting_is_refused(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "hosts: " + "[" * 500 + "]" * 500 + "\n")
    p = one_problem(cli, "validate", str(path))
    assert p["line"] == 3 and "nested more than" in p["message"]


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_extends_of_a_device_or_fifo_is_refused_without_reading_it(cli: Any, tmp_path: Path, target: str) -> None:
    os.mkfifo(tmp_path / "fifo")  # nothing ever writes it: opening it for reading would block
    path = write(tmp_path, HEADER + f"extends: {target}\n")
    p = one_problem(cli, "validate", str(path))
    assert (p["file"], p["line"], p["field"]) == (str(path), 3, "extends")
    assert ("character device" if target == "/dev/zero" else "FIFO") in p["message"] and "not a regular file" in p[
        "message"
    ]


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_named_directly_is_refused(cli: Any, tmp_path: Path, special: str) -> None:
    os.mkfifo(tmp_path / "fifo")
    path = special if special.startswith("/") else str(tmp_path / special)
    for command in ("validate", "check", "render"):
        p = one_problem(cli, command, path)
        assert p["file"] == path and "not a regular file" in p["message"]


def test_oversized_files_are_refused_by_their_size(cli: Any, tmp_path: Path) -> None:
    big = write(tmp_path, HEADER + "# " + "x" * MAX_DOCUMENT_BYTES + "\n", "big.yaml")
    p = one_problem(cli, "validate", str(big))
    assert p["file"] == str(big) and "over the limit" in p["message"]
    child = write(tmp_path, HEADER + "extends: big.yaml\n", "child.yaml")
    p = one_problem(cli, "validate", str(child))
    assert (p["file"], p["line"], p["field"]) == (str(child), 3, "extends") and "over the limit" in p["message"]


def test_read_bounded_reads_up_to_the_limit_and_no_further(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(DocumentError, match="problem"):
        read_bounded(path, 99)


def test_a_document_of_many_values_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as info:
        parse_yaml("hosts: [" + ",".join(["1"] * 100_001) + "]\n", "f.yaml")
    [p] = info.value.problems
    assert "more than 100000 values" in p.message


def test_problems_are_capped(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "hosts: [" + ",".join(["1"] * 500) + "]\n")
    found = problems_of(path)
    assert len(found) == MAX_PROBLEMS + 1 and found[-1].message == f"{500 - MAX_PROBLEMS} more problem(s) not shown"


def problems_of(path: Path) -> list[Any]:
    with pytest.raises(DocumentError) as info:
        load_profile(path)
    return info.value.problems


# --- files that are not files ------------------------------------------------------------------------------


def test_extends_of_a_directory_is_refused_at_the_field(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    path = write(tmp_path, HEADER + "extends: base\n")
    p = one_problem(cli, "validate", str(path))
    assert (p["file"], p["line"], p["column"], p["field"]) == (str(path), 3, 1, "extends") and "is a directory" in p[
        "message"
    ]
    assert one_problem(cli, "check", str(path))["field"] == "extends"


def test_empty_extends_is_refused(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + 'extends: ""\n')
    assert one_problem(cli, "validate", str(path))["field"] == "extends"


def test_symlink_loops_are_refused(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    for command in ("validate", "check", "render"):
        p = one_problem(cli, command, str(tmp_path / "a.yaml"))
        assert p["file"] == str(tmp_path / "a.yaml") and "loop of symbolic links" in p["message"]
    path = write(tmp_path, HEADER + "extends: a.yaml\n", "child.yaml")
    p = one_problem(cli, "validate", str(path))
    assert (p["line"], p["field"]) == (3, "extends") and "loop of symbolic links" in p["message"]


def test_a_manifest_that_is_a_directory_is_refused_at_drafter_manifest(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "m.yaml").mkdir()
    path = write(tmp_path, GOOD)
    for command in ("validate", "check", "render"):
        p = one_problem(cli, command, str(path))
        assert (p["file"], p["line"], p["field"]) == (str(path), 10, "drafter.manifest") and "is a directory" in p[
            "message"
        ]
    with pytest.raises(DocumentError, match="problem"):
        load_manifest(tmp_path / "m.yaml")


def test_a_missing_manifest_is_still_left_to_check(tmp_path: Path) -> None:
    assert load_profile(write(tmp_path, GOOD)).model.drafter is not None  # GOOD names m.yaml, which does not exist


def test_an_unreadable_file_is_refused(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("running as a user who reads every file")
    assert "permission denied" in one_problem(cli, "validate", str(path))["message"]


# --- values that break later stages ------------------------------------------------------------------------


def test_an_integer_of_5001_digits_is_refused_at_its_field(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("version: 1", "version: " + "9" * 5001))
    p = one_problem(cli, "validate", str(path))
    assert (p["line"], p["field"]) == (5, "metadata.version") and "64 bits" in p["fix"]
    assert p["source_line"] is None  # too long to echo


@pytest.mark.parametrize("value", [str(2**63), "0x" + "f" * 17, "1" + ":1" * 200])
def test_integers_beyond_64_bits_are_refused(tmp_path: Path, value: str) -> None:
    [p] = problems_of(write(tmp_path, GOOD.replace("version: 1", f"version: {value}")))
    assert p.field == "metadata.version" and p.line == 5


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("!!python/object:os.system x", "cannot read this value"),
        ("!!int abc", "cannot read 'abc'"),
        ("2024-13-01", "cannot read '2024-13-01'"),
    ],
)
def test_values_the_safe_constructor_refuses_are_positioned(tmp_path: Path, value: str, message: str) -> None:
    [p] = problems_of(write(tmp_path, GOOD.replace("  name: demo", f"  name: {value}")))
    assert p.field == "metadata.name" and p.line == 4 and message in p.message


def test_control_characters_in_the_yaml_text_are_bad_input(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("name: demo", "name: de\x1bmo"))
    p = one_problem(cli, "validate", str(path))
    assert (
        (p["line"], p["column"]) == (4, 11)
        and "'\\x1b' may not be written raw" in p["message"]
        and '"\\x1b"' in p["fix"]
    )
    assert p["source_line"] is None  # echoing it would send the ESC to the terminal
    assert "\x1b" not in cli("validate", str(path)).stderr


def test_field_names_in_errors_escape_what_a_terminal_acts_on(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + '"\\e[31mzz": 1\n')
    p = one_problem(cli, "validate", str(path))
    assert p["field"] == "\\x1b[31mzz" and p["line"] == 17
    assert "\x1b" not in cli("validate", str(path)).stderr


def test_a_complex_key_is_refused(tmp_path: Path) -> None:
    [p] = problems_of(write(tmp_path, GOOD + "? [a, b]\n: 1\n"))
    assert p.line == 17 and "plain name" in p.message


# --- names and roots that become paths ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x" * 101, ".hidden", "-dash", "a/b", "Upper", '""', '"demo\\n"'])
def test_profile_names_are_safe_directory_names(cli: Any, tmp_path: Path, name: str) -> None:
    path = write(tmp_path, GOOD.replace("name: demo", f"name: {name}"))
    p = one_problem(cli, "validate", str(path))
    assert (p["line"], p["field"]) == (4, "metadata.name")


def test_a_name_of_100_characters_is_fine(tmp_path: Path) -> None:
    assert (
        load_profile(write(tmp_path, GOOD.replace("name: demo", "name: " + "x" * 100))).model.metadata.name == "x" * 100
    )


INVENTORY = "apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  gpu-1:\n    ssh: gpu-1\n    root: {root}\n"


@pytest.mark.parametrize("root", ['""', "relative/dir", "./x", "/", "//", "/./", "~user/x", '"\\0x"'])
def test_inventory_root_must_be_absolute_or_under_home(cli: Any, tmp_path: Path, root: str) -> None:
    path = write(tmp_path, INVENTORY.format(root=root), "hosts.yaml")
    p = one_problem(cli, "validate", str(path))
    assert (p["line"], p["field"]) == (6, "hosts.gpu-1.root")


@pytest.mark.parametrize("root", ['"~"', "~/.specctl", "/srv/specctl"])
def test_good_inventory_roots(cli: Any, tmp_path: Path, root: str) -> None:
    result = cli("validate", str(write(tmp_path, INVENTORY.format(root=root), "hosts.yaml")))
    assert result.code == 0, result.stderr


def test_inventory_host_names_are_bounded(cli: Any, tmp_path: Path) -> None:
    path = write(tmp_path, INVENTORY.format(root="/srv/x").replace("gpu-1:", "g" * 101 + ":"), "hosts.yaml")
    assert one_problem(cli, "validate", str(path))["line"] == 4


# --- NUL characters, which argv and the environment would silently cut -------------------------------------

ENGINE = 'engine:\n  name: sglang\n  version: "0.5.23"\n'


@pytest.mark.parametrize(
    ("engine", "field", "line"),
    [
        ('  args:\n    served-model-name: "a\\0b"\n', "engine.args.served-model-name", 18),
        ('  args:\n    ok: ["a", "b\\x00"]\n', "engine.args.ok.1", 18),
        ('  env:\n    SOME_VAR: "a\\0b"\n', "engine.env.SOME_VAR", 18),
        ('  python: "/usr/bin/python3\\0"\n', "engine.python", 17),
    ],
)
def test_nul_in_strings_that_reach_argv_or_env_is_refused(
    cli: Any, tmp_path: Path, engine: str, field: str, line: int
) -> None:
    path = write(tmp_path, GOOD.replace(ENGINE, ENGINE + engine))
    found = problems(cli, "validate", str(path))
    assert any((p["line"], p["field"]) == (line, field) and "NUL" in p["message"] for p in found), found


def test_nul_in_an_env_name_or_a_model_path_is_refused(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, GOOD.replace(ENGINE, ENGINE + '  env:\n    "A\\0": x\n')))
    assert {p.field for p in found} >= {"engine.env.A\\x00"}
    [p] = problems_of(write(tmp_path, GOOD.replace("model: /models/target", 'model: "/models/target\\0"')))
    assert (p.field, p.line) == ("target.model", 7) and "NUL" in p.message


# --- Slurm clusters in the inventory ----------------------------------------------------------------------

CLUSTER = (
    "apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  login-1:\n    ssh: login-1\n"
    "clusters:\n  gpu-slurm:\n    kind: slurm\n    login: {login}\n    root: {root}\n"
)


@pytest.mark.parametrize(
    ("login", "root", "line", "field", "says"),
    [
        ("login-2", "/shared/specctl", 9, "clusters.gpu-slurm.login", "not a host"),
        ("login-1", "shared/specctl", 10, "clusters.gpu-slurm.root", "not an absolute path"),
        # sbatch reads "%" and "\\" in --output as file name patterns: the job's log would go elsewhere
        ("login-1", "/shared/spec%jctl", 10, "clusters.gpu-slurm.root", "which Slurm does not keep"),
        ("login-1", "/shared/spec\\ctl", 10, "clusters.gpu-slurm.root", "which Slurm does not keep"),
    ],
)
def test_a_cluster_entry_names_its_login_node_and_a_shared_root(
    cli: Any, tmp_path: Path, login: str, root: str, line: int, field: str, says: str
) -> None:
    p = one_problem(cli, "validate", str(write(tmp_path, CLUSTER.format(login=login, root=root), "hosts.yaml")))
    assert (p["line"], p["field"]) == (line, field) and says in p["message"], p


def test_a_cluster_resolves_to_its_login_node(tmp_path: Path) -> None:
    from specctl.hosts.inventory import resolve_hosts

    path = write(
        tmp_path, CLUSTER.format(login="login-1", root="/shared/specctl") + "    partition: gpu\n", "hosts.yaml"
    )
    [spec] = resolve_hosts(["gpu-slurm"], path)
    assert (spec.name, spec.root, spec.ssh_alias) == ("gpu-slurm", "/shared/specctl", "login-1")
    assert spec.slurm is not None and spec.slurm.partition == "gpu"
    [local] = resolve_hosts(["gpu-slurm"], write(tmp_path, CLUSTER.format(login="local", root="/s"), "local.yaml"))
    assert local.ssh_alias is None and local.transport().name == "gpu-slurm"  # this machine, named as the cluster


@pytest.mark.parametrize(
    ("entry", "line", "field", "says"),
    [
        ("    kind: pbs\n    root: /s\n", 5, "clusters.x.kind", "'slurm', 'kubernetes'"),
        ("    kind: kubernetes\n    namspace: a\n", 6, "clusters.x.namspace", "unknown key"),
        (
            "    kind: slurm\n    login: local\n    root: /s\n    partiton: gpu\n",
            8,
            "clusters.x.partiton",
            "unknown key",
        ),
    ],
)
def test_a_cluster_entry_of_either_kind_is_checked_as_that_kind(
    cli: Any, tmp_path: Path, entry: str, line: int, field: str, says: str
) -> None:
    text = "apiVersion: specctl/v1\nkind: Inventory\nclusters:\n  x:\n" + entry
    p = one_problem(cli, "validate", str(write(tmp_path, text, "hosts.yaml")))
    assert (p["line"], p["field"]) == (line, field) and says in p["message"], p
    if "namspace" in field:
        assert "namespace" in p["fix"]  # the kubernetes kind's own keys, not slurm's
    if "partiton" in field:
        assert "partition" in p["fix"]


# --- engine.host: what the server binds ----------------------------------------------------------------------


@pytest.mark.parametrize("host", ['"0.0.0.0; touch /tmp/x"', '"$(id)"', "a_b", '"-x"', '""', '"host name"'])
def test_engine_host_is_an_address_or_a_host_name(cli: Any, tmp_path: Path, host: str) -> None:
    path = write(tmp_path, GOOD.replace(ENGINE, ENGINE + f"  host: {host}\n"))
    p = one_problem(cli, "validate", str(path))
    assert (p["file"], p["line"], p["field"]) == (str(path), 17, "engine.host"), p
    assert p["column"] == 3 and "neither an IP address nor a host name" in p["message"] and "0.0.0.0" in p["fix"]


@pytest.mark.parametrize("host", ['"0.0.0.0"', '"::"', "127.0.0.1", "node-1.example.com", "localhost", '"fe80::1"'])
def test_engine_host_takes_addresses_and_names(tmp_path: Path, host: str) -> None:
    assert load_profile(write(tmp_path, GOOD.replace(ENGINE, ENGINE + f"  host: {host}\n"))).model.engine.host


SECRET = "s3cr3t-hash-4f9a2c"


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("shadow", f"root:$6${SECRET}:19000:0:99999:7:::\n", "is not a YAML file"),
        ("secrets.txt", f"token = {SECRET}\n", "is not a YAML file"),
        ("notes.yaml", f"password: {SECRET}\n", "it is not a Profile"),
        ("list.yml", f"- {SECRET}\n", "it is not a YAML mapping"),
        ("broken.yaml", f"key: [{SECRET}\n", "it is not readable UTF-8 YAML"),
        ("manifest.yaml", f"apiVersion: specctl/v1\nkind: DrafterManifest\nnote: {SECRET}\n", "it is not a Profile"),
    ],
)
def test_extends_of_a_file_that_is_not_a_yaml_profile_is_refused_without_quoting_it(
    cli: Any, tmp_path: Path, name: str, content: str, said: str
) -> None:
    """Issue 34: `extends:` reads YAML profiles only; a refused file's content is never printed (an
    `extends: /etc/shadow` must not show a line of it), in the error for people or under --json."""
    (tmp_path / name).write_text(content)
    child = write(tmp_path, HEADER + f"extends: {name}\n", "child.yaml")
    p = one_problem(cli, "validate", str(child))
    assert (p["file"], p["line"], p["field"]) == (str(child), 3, "extends") and said in p["message"], p
    for args in (("--json", "validate", str(child)), ("validate", str(child)), ("check", str(child))):
        shown = cli(*args)
        assert shown.code == 2 and SECRET not in shown.stdout + shown.stderr, shown.stdout + shown.stderr
