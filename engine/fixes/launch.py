"""Launch command rewrites: parse a command with shlex, rebuild it in the launcher form a fix needs, check it."""
from __future__ import annotations

import os
import re
import shlex
import socket
from dataclasses import dataclass, field

from gpudoctor.engine.fixes.errors import FixError, NotApplicable
from gpudoctor.engine.fixes.exclude import exclude_faulty
from gpudoctor.engine.fixes.srun import one_task_per_node, split_srun, srun_per_node

# options of each launcher that take no value; every other option takes one (as --x=v or --x v)
_FLAGS = {
    "torchrun": {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path",
                 "--use-env", "--use_env"},
    "accelerate": {"--multi_gpu", "--cpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm", "--use_xpu",
                   "--debug", "-m", "--module", "--no_python", "-q", "--quiet", "--same_network", "--tpu",
                   "--dynamo_use_fullgraph", "--dynamo_use_dynamic"},
    "deepspeed": {"--no_python", "--module", "--no_local_rank", "--force_multi", "--bind_cores_to_rank",
                  "--elastic_training", "--no_ssh", "--no_ssh_check", "--save_pid", "--enable_each_rank_log"},
    "python": {"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-b", "-bb", "-q", "-v"},
}
# the environment a launcher sets for each worker: a hand-set copy in front of the command is dropped
_LAUNCHER_ENV = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"}


_LOCAL_RANK_ARG = re.compile(r"--local[_-]rank(?:=(\d+))?$")


@dataclass
class Launch:
    """A launch command split into its parts."""

    env: list[str]  # leading NAME=value words
    launcher: str  # python | torchrun | accelerate | deepspeed
    options: list[tuple[str, str | None]]  # the launcher's own options, in order; python's for plain python
    script: str  # the script path, or the module name when module is set
    module: bool = False
    args: list[str] = field(default_factory=list)  # the script's own arguments
    wrapper: list[str] = field(default_factory=list)  # srun and its options, when srun starts the launcher
    legacy: bool = False  # python -m torch.distributed.launch (torchrun's options, plus --use_env)
    lead: list[str] = field(default_factory=list)  # every word before the launcher, in order: NAME=value, env, nohup

    @property
    def passes_local_rank(self) -> bool:
        """Whether the launcher appends --local_rank=N (--local-rank=N from torch 2.0) to each worker's arguments:
        torch.distributed.launch does unless --use_env; torchrun never does (it sets LOCAL_RANK)."""
        return self.legacy and self.option("--use_env", "--use-env") is None

    def literal_local_rank(self) -> tuple[int, int] | None:
        """Where (start, end) in the script's arguments a literal --local_rank N sits under a launcher that passes
        none (torchrun, or torch.distributed.launch --use_env) with more than one process per node, or None. Every
        worker parses the same N, so a script that picks its GPU from it puts every rank on one GPU (D3).
        torch.distributed.launch without --use_env appends its own --local_rank=i, and argparse keeps the last."""
        if self.launcher != "torchrun" or self.passes_local_rank:
            return None
        if (self.option("--nproc-per-node") or "1").strip() == "1":
            return None  # one worker (torchrun's default): nobody to share its GPU with
        for i, word in enumerate(self.args):
            m = _LOCAL_RANK_ARG.match(word)
            if m is None:
                continue
            if m.group(1) is not None:
                return i, i + 1
            if i + 1 < len(self.args) and self.args[i + 1].isdigit():
                return i, i + 2
        return None

    def option(self, *names: str) -> str | None:
        keys = {_norm(n) for n in names}
        for name, value in self.options:
            if _norm(name) in keys:
                return value if value is not None else ""
        return None


def _norm(option: str) -> str:
    return option.replace("_", "-")


def parse_launch(cmd: str) -> Launch:
    """Split a launch command; FixError names what is wrong with it."""
    try:
        words = shlex.split(cmd, comments=False)
    except ValueError as exc:
        raise FixError(f"--cmd: cannot parse the command ({exc})") from None
    env, lead = [], []
    while words:  # what runs the launcher without changing it: assignments, env, nohup, time, exec, uv run
        if "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
            env.append(words[0])
        elif words[0] in _PASS_THROUGH or (words[0] in ("-p", "-i") and lead[-1:] in (["time"], ["env"])):
            pass
        elif words[0] in _RUNNERS and words[1:2] == ["run"]:
            lead.append(words.pop(0))
        else:
            break
        lead.append(words.pop(0))
    wrapper, words = split_srun(words)
    if not words:
        raise FixError("--cmd: no command given")
    head = os.path.basename(words[0])
    rest = words[1:]
    if head.startswith("python"):
        options, rest = _take_options(rest, "python", stop_at={"-m", "-c"})
        if rest[:1] == ["-c"]:
            raise FixError("--cmd: a `python -c` command has no script to launch")
        if rest[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            legacy = rest[1] == "torch.distributed.launch"
            options, rest = _take_options(rest[2:], "torchrun")
            launch = _with(_finish(env, "torchrun", options, rest), wrapper, lead)
            launch.legacy = legacy
            return launch
        else:
            return _with(_finish(env, "python", options, rest), wrapper, lead)
    elif head == "torchrun":
        launcher = "torchrun"
    elif head == "accelerate":
        if rest[:1] != ["launch"]:
            raise FixError("--cmd: expected `accelerate launch ...`")
        launcher, rest = "accelerate", rest[1:]
    elif head == "deepspeed":
        launcher = "deepspeed"
    else:
        raise FixError(f"--cmd: {words[0]!r} is not a launcher gpudoctor knows (python, torchrun, accelerate, deepspeed)")
    options, rest = _take_options(rest, launcher)
    return _with(_finish(env, launcher, options, rest), wrapper, lead)


_PASS_THROUGH = {"env", "nohup", "time", "exec", "command"}  # run the command after them as it is
_RUNNERS = {"uv", "poetry", "pipenv", "pdm", "hatch", "rye"}  # `uv run torchrun ...`: the project's environment


def _with(launch: Launch, wrapper: list[str], lead: list[str]) -> Launch:
    launch.wrapper, launch.lead = wrapper, lead
    return launch


def _take_options(words: list[str], launcher: str, stop_at=frozenset()) -> tuple[list, list[str]]:
    options: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] not in stop_at:
        word = words[i]
        if word == "--":
            i += 1
            break
        if "=" in word and word.startswith("--"):
            name, value = word.split("=", 1)
            options.append((name, value))
        elif word in _FLAGS[launcher]:
            options.append((word, None))
            if word in ("-m", "--module"):
                i += 1
                break
        elif i + 1 < len(words):
            options.append((word, words[i + 1]))
            i += 1
        else:
            raise FixError(f"--cmd: option {word} needs a value")
        i += 1
    return options, words[i:]


def _finish(env, launcher, options, rest) -> Launch:
    module = False
    if launcher == "python" and rest[:1] == ["-m"]:
        module, rest = True, rest[1:]
    elif any(name in ("-m", "--module") for name, _ in options):
        module = True
    if not rest:
        raise FixError("--cmd: the command names no training script")
    return Launch(env=env, launcher=launcher, options=options, script=rest[0], module=module, args=rest[1:])


def _opts(pairs) -> list[str]:
    return [name if value is None else f"{name}={value}" for name, value in pairs]


def _kept(launch: Launch, launcher: str, drop: set[str]) -> list[str]:
    """The launcher's own options that survive the rewrite (only when the launcher stays the same)."""
    if launch.launcher != launcher:
        return []
    return _opts((n, v) for n, v in launch.options if _norm(n) not in {_norm(d) for d in drop} and n not in ("-m", "--module"))


def _script_words(launch: Launch, launcher: str) -> list[str]:
    head = []
    if launch.module:
        head = ["--module"] if launcher in ("torchrun", "deepspeed") else ["-m"]
    return head + [launch.script] + launch.args


def _env(launch: Launch, drop: tuple[str, ...] = ()) -> list[str]:
    """The words before the launcher, kept in their order (env, nohup, uv run...), less the variables the rewrite
    sets itself and the launcher's own (RANK, WORLD_SIZE...)."""
    def dropped(w: str) -> bool:
        name = w.split("=", 1)[0] if "=" in w else None
        return name is not None and name.isidentifier() and (name in _LAUNCHER_ENV or name in drop)

    return [w for w in (launch.lead or launch.env) if not dropped(w)]


def free_port(avoid: int | None = None) -> int:
    """A port nothing listens on now: the kernel picks it (a read of system state, nothing written)."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != avoid:
            return port
    raise FixError("could not find a free port")


def _count(facts: dict, *keys: str):
    for key in keys:
        if facts.get(key) not in (None, ""):
            return facts[key]
    return None


def rewrite(cmd: str, how: str, facts: dict) -> tuple[str, list[str]]:
    """The rewritten command and notes for the user; the result is parsed back and checked."""
    launch = parse_launch(cmd)
    notes: list[str] = []
    build = _REWRITES[how]
    words = build(launch, facts, notes)
    if launch.wrapper:  # srun (as the rewrite left it) goes after the leading NAME=value words
        lead = 0
        while lead < len(words) and "=" in words[lead] and words[lead].split("=", 1)[0].isidentifier():
            lead += 1
        words = words[:lead] + launch.wrapper + words[lead:]
    new = shell_join(words)
    check(new, launch, words)
    if new == shell_join(shlex.split(cmd)):
        raise NotApplicable(f"--cmd is already in the {how} form")
    return new, notes


# a word the shell must expand as the user meant it ($VAR, ${VAR}, ~/x, a glob): printed bare when it holds nothing
# else that needs quoting, in double quotes (which keep $ and $(...) live) when it does
_EXPANDS = re.compile(r"[\w@%+=:,./~*?\[\]{}$-]+")


def shell_word(word: str) -> str:
    quoted = shlex.quote(word)
    if quoted == word or not ("$" in word or word.startswith("~") or "=~" in word or any(c in word for c in "*?[")):
        return quoted
    if _EXPANDS.fullmatch(word) and "$(" not in word:
        return word
    if "$" in word and not any(c in word for c in '"\\`'):
        return f'"{word}"'
    return quoted


def shell_join(words: list[str]) -> str:
    """The words as one command line, the user's variables, ~ and globs left for the shell to expand."""
    return " ".join(shell_word(w) for w in words)


def check(new: str, original: Launch, words: list[str]) -> None:
    """The rebuilt command splits back into the same words and keeps the script and its arguments."""
    if shlex.split(new) != words:
        raise FixError(f"internal: the rewritten command does not split back into its words: {new}")
    again = parse_launch(new)
    kept = again.args[: len(original.args)]  # a rewrite may append (the deepspeed config), never drop or reorder
    if (again.script, kept, again.module) != (original.script, original.args, original.module):
        raise FixError(f"internal: the rewritten command lost the script or its arguments: {new}")


_TORCHRUN_RDZV = {"--standalone", "--nnodes", "--nproc-per-node", "--master-port", "--master-addr", "--rdzv-backend",
                  "--rdzv-endpoint", "--rdzv-id", "--node-rank", "--rdzv-conf"}


def _torchrun_standalone(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    nproc = _count(facts, "nproc", "world_size") or launch.option("--nproc-per-node") or "gpu"
    if launch.launcher == "python" and launch.options:
        notes.append(f"python options {' '.join(_opts(launch.options))} dropped: torchrun starts the interpreter itself")
    if nproc == "gpu":
        notes.append("--nproc-per-node=gpu starts one process per visible GPU; give --param nproc=N to fix the count")
    return [*_env(launch), "torchrun", "--standalone", "--nnodes=1", f"--nproc-per-node={nproc}",
            *_kept(launch, "torchrun", _TORCHRUN_RDZV), *_script_words(launch, "torchrun")]


def _torchrun_multinode(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    nnodes = _count(facts, "nnodes") or launch.option("--nnodes") or 2
    nproc = _count(facts, "nproc") or launch.option("--nproc-per-node") or "gpu"
    addr = _count(facts, "master_addr")
    if not addr:
        addr = "HEAD_NODE_IP"
        notes.append("replace HEAD_NODE_IP with the address of one node that every node can reach "
                     "(or give --param master_addr=...)")
    port = _count(facts, "rdzv_port") or 29400
    job = _count(facts, "job_id") or "job1"
    notes.append("run this same command on every node")
    return [*_env(launch), "torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--rdzv-id={job}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={addr}:{port}",
            *_kept(launch, "torchrun", _TORCHRUN_RDZV), *_script_words(launch, "torchrun")]


def _free_port(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    busy = _count(facts, "port")
    busy = int(busy) if str(busy or "").isdigit() else None
    port = _count(facts, "free_port") or free_port(avoid=busy)
    if launch.launcher == "torchrun":
        nnodes = str(launch.option("--nnodes") or _count(facts, "nnodes") or "1")
        if nnodes == "1":
            notes.append("localhost:0 lets torchrun pick a free port when it starts")
            drop = {"--master-port", "--master-addr", "--standalone", "--rdzv-backend", "--rdzv-endpoint", "--nnodes"}
            return [*_env(launch), "torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "--nnodes=1",
                    *_kept(launch, "torchrun", drop), *_script_words(launch, "torchrun")]
        if str(launch.option("--node-rank") or "") != "0" and _count(facts, "free_port") is None:
            # planned on another node (or one that does not say): a port free here says nothing about the master's
            notes.append(f"the port must be free on the master node ({launch.option('--master-addr') or 'node 0'}) "
                         "and the same on every node: set MASTER_PORT there (python -c \"import socket; "
                         "s=socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])\" prints one) and on every "
                         "node, or give --param free_port=N")
            port = "$MASTER_PORT"
        else:
            notes.append(f"port {port} was free on this machine when planned; every node must use the same one")
        return [*_env(launch), "torchrun", *_kept(launch, "torchrun", {"--master-port"}), f"--master-port={port}",
                *_script_words(launch, "torchrun")]
    if launch.launcher == "accelerate":
        return [*_env(launch), "accelerate", "launch", *_kept(launch, "accelerate", {"--main_process_port"}),
                f"--main_process_port={port}", *_script_words(launch, "accelerate")]
    if launch.launcher == "deepspeed":
        return [*_env(launch), "deepspeed", *_kept(launch, "deepspeed", {"--master_port"}), f"--master_port={port}",
                *_script_words(launch, "deepspeed")]
    return [f"MASTER_PORT={port}", *_env(launch, ("MASTER_PORT",)), *_python(launch)]  # first: nohup runs what follows


def _python(launch: Launch) -> list[str]:
    return ["python", *_opts(launch.options), *_script_words(launch, "python")]


def _accelerate(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    nproc = _count(facts, "world_size", "nproc") or launch.option("--num_processes")
    if nproc in (None, "", "1", 1):
        nproc = None
        notes.append("without --num_processes, accelerate starts one process per visible GPU")
    config = facts.get("accelerate_config")
    drop = {"--multi_gpu", "--num_processes", "--cpu", "--config_file"}
    return [*_env(launch), "accelerate", "launch", "--multi_gpu", *([f"--num_processes={nproc}"] if nproc else []),
            *([f"--config_file={config}"] if config else []),
            *_kept(launch, "accelerate", drop), *_script_words(launch, "accelerate")]


def _deepspeed(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    nproc = _count(facts, "nproc") or launch.option("--num_gpus")
    nnodes = str(_count(facts, "nnodes") or launch.option("--num_nodes") or "1")
    words = [*_env(launch), "deepspeed"]
    drop = {"--num_gpus", "--hostfile", "--num_nodes"}
    if nnodes != "1":  # the nodes come from the hostfile; --num_nodes then takes the first N of them
        hostfile = launch.option("--hostfile") or "hostfile"
        words += [f"--hostfile={hostfile}", f"--num_nodes={nnodes}"]
        notes.append(f"write `{hostfile}` with one `host slots=N` line per node, and check passwordless SSH to each")
    if nproc:
        words.append(f"--num_gpus={nproc}")
    words += [*_kept(launch, "deepspeed", drop), *_script_words(launch, "deepspeed")]
    ds_config = facts.get("ds_config")
    if ds_config and "--deepspeed" not in launch.args and "--deepspeed_config" not in launch.args:
        words += ["--deepspeed", str(ds_config)]
    elif "--deepspeed" not in launch.args:
        notes.append("the script must read its DeepSpeed config: pass --deepspeed ds_config.json (or --param ds_config=...)")
    return words


def _nproc_to_gpus(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    """D27: the same launcher and script, with one process per visible GPU on each node."""
    from gpudoctor.engine.fixes.srun import copies_per_node

    if launch.wrapper and (copies_per_node(launch.wrapper) or 1) > 1:
        raise NotApplicable(f"srun starts {copies_per_node(launch.wrapper)} copies of {launch.launcher} per node: "
                            "fewer workers per copy does not help; see srun-one-task-per-node")
    nproc = _count(facts, "nproc")
    if launch.launcher == "torchrun":
        if not nproc:
            nproc = "gpu"
            notes.append("--nproc-per-node=gpu starts one process per GPU the node can see (torch 1.10+); "
                         "give --param nproc=N to pin the count")
        return [*_env(launch), "torchrun", f"--nproc-per-node={nproc}", *_kept(launch, "torchrun", {"--nproc-per-node"}),
                *_script_words(launch, "torchrun")]
    if launch.launcher == "accelerate":
        if not nproc:
            raise NotApplicable("give --param nproc=N, the GPUs on each machine times the machines, for accelerate's "
                                "--num_processes")
        return [*_env(launch), "accelerate", "launch", f"--num_processes={nproc}",
                *_kept(launch, "accelerate", {"--num_processes"}), *_script_words(launch, "accelerate")]
    if launch.launcher == "deepspeed":
        if not nproc:
            notes.append("without --num_gpus the deepspeed launcher starts one process per visible GPU")
        return [*_env(launch), "deepspeed", *([f"--num_gpus={nproc}"] if nproc else []),
                *_kept(launch, "deepspeed", {"--num_gpus", "--num-gpus"}), *_script_words(launch, "deepspeed")]
    raise NotApplicable(f"{launch.launcher} starts one process: nothing to count against the GPUs")


def _drop_literal_local_rank(launch: Launch, facts: dict, notes: list[str]) -> list[str]:
    """D3: the same launch without the --local_rank N written into the script's arguments, which torchrun (and
    torch.distributed.launch --use_env) hands unchanged to every worker."""
    at = launch.literal_local_rank()
    if at is None:
        raise NotApplicable("the command gives the script no literal --local_rank under a launcher that passes none")
    start, end = at
    launch.args = launch.args[:start] + launch.args[end:]
    notes.append("the script must then read its local rank from the environment: "
                 "int(os.environ['LOCAL_RANK']) (gpudoctor lint flags a device chosen otherwise)")
    if launch.legacy:
        return [*_env(launch), "python", "-m", "torch.distributed.launch", *_kept(launch, "torchrun", set()),
                *_script_words(launch, "torchrun")]
    return [*_env(launch), "torchrun", *_kept(launch, "torchrun", set()), *_script_words(launch, "torchrun")]


_REWRITES = {
    "drop-literal-local-rank": _drop_literal_local_rank,
    "torchrun-standalone": _torchrun_standalone,
    "torchrun-multinode": _torchrun_multinode,
    "free-port": _free_port,
    "accelerate-multi-gpu": _accelerate,
    "deepspeed-launcher": _deepspeed,
    "nproc-to-gpus": _nproc_to_gpus,
    "srun-one-task-per-node": one_task_per_node,
    "srun-per-node": srun_per_node,
    "exclude-faulty-gpu": exclude_faulty,
}
