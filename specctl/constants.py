"""Names and defaults in one place; the unit is in the name."""

from __future__ import annotations

APP_NAME = "specctl"
RELEASE_DIR_VAR = "SPECCTL_RELEASE_DIR"  # set by the launch script to its own directory
# in every server's environment: "<inventory host> <release directory>", the proof that specctl started it there
SERVER_MARK_VAR = "SPECCTL_SERVER"
OVERLAY_DIR = "drafter-overlay"  # the drafter overlay inside a release directory
OVERLAY_PATH = f"${{{RELEASE_DIR_VAR}}}/{OVERLAY_DIR}"  # expanded by the launch script, nothing else is
HEAD_ADDRESS_VAR = "SPECCTL_HEAD_ADDRESS"  # a scheduler's job: node rank 0's address, known only once it is placed
HEAD_ADDRESS = f"${{{HEAD_ADDRESS_VAR}}}"
ADAPTIVE_FILE = "speculative-adaptive.json"  # a profile's adaptive-speculation tiers, in the release
ADAPTIVE_PATH = f"${{{RELEASE_DIR_VAR}}}/{ADAPTIVE_FILE}"
DEFAULT_MEM_FRACTION_STATIC = 0.85  # assumed when a profile leaves the engine to choose
KV_HEADROOM_MIN_GIB = 4.0  # KV cache room below which a deploy is refused
GIB = 1024**3
STARTUP_BUDGET_S = 40 * 60
K8S_MODEL_MOUNT = "/specctl/models"  # where `render --target k8s` mounts the model volume (the HF cache is under it)
K8S_PYTHON = "python3"  # the interpreter of the engines' published images, in place of a host's engine.python
STAGE_PARALLEL = 4  # hosts downloading checkpoints at once (the Hub, a mirror or a shared uplink is the limit)
TIME_LIMIT_WARN_S = 60 * 60  # `status` flags a Slurm job whose time limit ends serving within this
# how long a host's (a login node's) SSH connection may stay down while a server starts, or under
# verify's requests through a tunnel, before the failure counts: readiness keeps looking, channels are
# opened again and cut-off requests sent again meanwhile
LOGIN_BLIP_BUDGET_S = 30.0
