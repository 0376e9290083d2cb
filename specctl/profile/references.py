"""A profile's references to other files, checked as it loads: what a deploy would read, validate reads first.

The drafter manifest and the verify workload are paths written in the profile; a directory, a device
or a file that is no workload at all there used to pass validate and fail only on a host.
"""

from __future__ import annotations

from specctl.errors import DocumentError, DocumentProblem, InputError
from specctl.profile._files import MAX_DOCUMENT_BYTES, refusal
from specctl.profile._yaml import printable
from specctl.profile.document import Loaded
from specctl.profile.profile import Profile


def check_references(loaded: Loaded[Profile]) -> None:
    """Raise a DocumentError at the field of each reference that cannot be what it names."""
    problems = [p for p in (_manifest_problem(loaded), _workload_problem(loaded)) if p is not None]
    if problems:
        raise DocumentError(problems)


def _manifest_problem(loaded: Loaded[Profile]) -> DocumentProblem | None:
    """A manifest that exists must be a readable document; a missing one is reported where it is read."""
    drafter = loaded.model.drafter
    if drafter is None:
        return None
    path = loaded.file_of("drafter", "manifest").parent / drafter.manifest
    found = refusal(path, MAX_DOCUMENT_BYTES)
    if found is None or found.missing:
        return None
    return loaded.problem(
        ("drafter", "manifest"),
        f"manifest {drafter.manifest!r} ({printable(str(path))}): {found.message}",
        f"{found.fix}; the path is relative to this file",
    )


def _workload_problem(loaded: Loaded[Profile]) -> DocumentProblem | None:
    """The workload must be built in, or a file that parses as one."""
    from specctl.verdict.workload import load_workload  # reads and parses the file, as a verify would

    try:
        load_workload(loaded.model.verify.workload, loaded.file_of("verify", "workload").parent)
    except DocumentError as exc:
        return loaded.problem(("verify", "workload"), exc.problems[0].message, exc.problems[0].fix)
    except InputError as exc:
        return loaded.problem(("verify", "workload"), exc.message, exc.fix or "use a built-in workload or a JSONL file")
    return None
