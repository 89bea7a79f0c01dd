"""A fingerprint of the program a traced process actually runs (for ``forensics diff``'s
NOT COMPARABLE check): the script's content hash, the interpreter, the local files it imported
(their hashes) and the installed packages it imported (their versions), the git commit it runs
from, and which packages and local source files issued the traced ops; and the in-process
switches (``torch.backends`` flags, deterministic mode, matmul precision, thread counts) it runs
with.

Pure stdlib; everything here is best effort and bounded (a missing ``git``, an unreadable file or
a slow repository leaves a field out, never breaks the traced program).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 5.0
MAX_SOURCES = 64  # local source files hashed per process
MAX_MODULES = 4096  # local files imported, hashed per process
MAX_HASH_BYTES = 64 << 20
#: modules a ``.pth`` file imports at start-up (an editable install's finder, setuptools' and
#: virtualenv's hooks): the environment's plumbing, not the program
STARTUP_HOOKS = ("__editable__", "_distutils_hack", "_virtualenv")
_RESUMABLE = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def _sha256_file(path: str) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def _git(args: list[str], cwd: str) -> bytes | None:
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=GIT_TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(directory: str) -> dict[str, Any] | None:
    """``{"root", "commit"}`` of the git working tree holding ``directory``, or None.

    Which files of the tree the program ran is in ``program.modules`` (their content hashes); the
    tree's other files (untracked outputs, a ``runA/`` trace folder, notes) are not the program,
    and no hash of the whole tree is taken."""
    top = _git(["rev-parse", "--show-toplevel"], directory)
    if not top:
        return None
    root = top.decode(errors="replace").strip()
    commit = _git(["rev-parse", "HEAD"], root)
    if commit is None:
        return None
    return {"root": root, "commit": commit.decode().strip()}


def script_path() -> str | None:
    """The script (or ``-m`` module file) this process runs, when it is a file."""
    argv0 = sys.argv[0] if sys.argv else ""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or argv0
    if path and path not in ("-c", "-m", "-") and os.path.isfile(path):
        return os.path.abspath(path)
    return None


def interpreter() -> dict[str, Any]:
    """The interpreter that runs the program: its executable (a path: a warning when it differs)
    and its full version string (build included: NOT COMPARABLE when it differs)."""
    return {"executable": sys.executable, "version": sys.version, "implementation": sys.implementation.name}


def program(sources: dict[str, str] | None = None, issuers: "Issuers | None" = None,
            exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fingerprint recorded in the trace header: the script and its hash, the interpreter, the
    local files and installed packages the process has imported (``issuers``; ``exclude``:
    folders whose files never count, the tracer's own output), the git commit, the sources that
    issued traced ops."""
    info: dict[str, Any] = {}
    path = script_path()
    info["script"] = path
    info["sha256"] = _sha256_file(path) if path else None
    info["interpreter"] = interpreter()
    state = git_state(os.path.dirname(path) if path else os.getcwd())
    if state is not None:
        info["git"] = state
    if issuers is not None:
        info.update(issuers.imported(exclude=(path,) if path else (), exclude_dirs=exclude))
    if sources:
        info["sources"] = dict(sorted(sources.items()))
    return info


def switches() -> dict[str, Any]:
    """The in-process switches that select an implementation or its numerics, as this process has
    them now (:data:`SWITCHES`): ``{name: value}``, a name whose reading fails left out. Plain
    attribute and flag reads: nothing here initialises CUDA or creates a thread pool, and any
    warning a deprecated accessor gives is swallowed."""
    import warnings  # noqa: PLC0415

    import torch  # noqa: PLC0415

    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, read in SWITCHES:
            try:
                v = read(torch)
            except Exception:  # noqa: BLE001 - absent in this torch: not recorded
                continue
            out[name] = v if isinstance(v, (bool, int, float, str)) or v is None else str(v)
    return out


#: ``(name, reader)`` of each switch :func:`switches` records: torch.backends flags (oneDNN,
#: cuDNN, cuBLAS matmul precision and reductions, attention backends), the deterministic mode, the
#: float32 matmul precision, the thread counts, and the CPU capability ATen dispatches to (what
#: ``ATEN_CPU_CAPABILITY`` selects)
SWITCHES: tuple[tuple[str, Any], ...] = (
    ("torch.backends.mkldnn.enabled", lambda t: t.backends.mkldnn.enabled),
    ("torch.backends.mkldnn.deterministic", lambda t: t.backends.mkldnn.deterministic),
    ("torch.backends.mkldnn.allow_tf32", lambda t: t.backends.mkldnn.allow_tf32),
    ("torch.backends.mkldnn.matmul.fp32_precision", lambda t: t.backends.mkldnn.matmul.fp32_precision),
    ("torch.backends.mkldnn.conv.fp32_precision", lambda t: t.backends.mkldnn.conv.fp32_precision),
    ("torch.backends.mkldnn.rnn.fp32_precision", lambda t: t.backends.mkldnn.rnn.fp32_precision),
    ("torch.backends.fp32_precision", lambda t: t.backends.fp32_precision),
    ("torch.backends.cudnn.enabled", lambda t: t.backends.cudnn.enabled),
    ("torch.backends.cudnn.deterministic", lambda t: t.backends.cudnn.deterministic),
    ("torch.backends.cudnn.benchmark", lambda t: t.backends.cudnn.benchmark),
    ("torch.backends.cudnn.benchmark_limit", lambda t: t.backends.cudnn.benchmark_limit),
    ("torch.backends.cudnn.allow_tf32", lambda t: t.backends.cudnn.allow_tf32),
    ("torch.backends.cudnn.conv.fp32_precision", lambda t: t.backends.cudnn.conv.fp32_precision),
    ("torch.backends.cudnn.rnn.fp32_precision", lambda t: t.backends.cudnn.rnn.fp32_precision),
    ("torch.backends.cuda.matmul.allow_tf32", lambda t: t.backends.cuda.matmul.allow_tf32),
    ("torch.backends.cuda.matmul.fp32_precision", lambda t: t.backends.cuda.matmul.fp32_precision),
    ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
     lambda t: t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
    ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
     lambda t: t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
    ("torch.backends.cuda.matmul.allow_fp16_accumulation", lambda t: t.backends.cuda.matmul.allow_fp16_accumulation),
    ("torch.backends.cuda.preferred_blas_library", lambda t: t.backends.cuda.preferred_blas_library()),
    ("torch.backends.cuda.preferred_linalg_library", lambda t: t.backends.cuda.preferred_linalg_library()),
    ("torch.backends.cuda.flash_sdp_enabled", lambda t: t.backends.cuda.flash_sdp_enabled()),
    ("torch.backends.cuda.mem_efficient_sdp_enabled", lambda t: t.backends.cuda.mem_efficient_sdp_enabled()),
    ("torch.backends.cuda.math_sdp_enabled", lambda t: t.backends.cuda.math_sdp_enabled()),
    ("torch.backends.cuda.cudnn_sdp_enabled", lambda t: t.backends.cuda.cudnn_sdp_enabled()),
    ("torch.backends.opt_einsum.enabled", lambda t: t.backends.opt_einsum.enabled),
    ("torch.backends.mha.get_fastpath_enabled", lambda t: t.backends.mha.get_fastpath_enabled()),
    ("torch.backends.cpu.get_cpu_capability", lambda t: t.backends.cpu.get_cpu_capability()),
    ("torch.are_deterministic_algorithms_enabled", lambda t: t.are_deterministic_algorithms_enabled()),
    ("torch.is_deterministic_algorithms_warn_only_enabled",
     lambda t: t.is_deterministic_algorithms_warn_only_enabled()),
    ("torch.utils.deterministic.fill_uninitialized_memory", lambda t: t.utils.deterministic.fill_uninitialized_memory),
    ("torch.get_float32_matmul_precision", lambda t: t.get_float32_matmul_precision()),
    ("torch.get_num_threads", lambda t: t.get_num_threads()),
    ("torch.get_num_interop_threads", lambda t: t.get_num_interop_threads()),
    ("torch.get_default_dtype", lambda t: t.get_default_dtype()),
)


class Issuers:
    """Which code issued traced ops: for each op, the first Python frame outside torch, the probes
    and the standard library is its issuer, either an installed package (recorded with its version)
    or a local source file (recorded with its content hash). One dict lookup per frame, one walk
    per calling frame."""

    SKIP = object()

    def __init__(self) -> None:
        import torch  # noqa: PLC0415

        here = Path(__file__).resolve().parent
        roots = [Path(torch.__file__).resolve().parent, here, here.parent / "forensics", here.parent / "parsers"]
        std = []
        for key in ("stdlib", "platstdlib"):
            try:
                std.append(Path(sysconfig.get_paths()[key]).resolve())
            except (KeyError, OSError):
                pass
        self.skip_roots = tuple(str(r) + os.sep for r in roots)
        # a virtual environment's platstdlib (venv/lib/python3.X) holds its site-packages: the
        # standard library is what is under these roots and not in site-packages
        self.std_roots = tuple(str(r) + os.sep for r in std)
        self.cache: dict[Any, Any] = {}
        self.packages: set[str] = set()
        self.sources: set[str] = set()
        # the tracer's own frames between an op's dispatch and the code that called the op
        self.own_roots = (str(here) + os.sep, str(Path(torch.__file__).resolve().parent / "_dynamo") + os.sep,
                          str(Path(torch.__file__).resolve().parent / "utils" / "_python_dispatch.py"))
        self.own: dict[Any, bool] = {}
        self.last: Any = None  # the caller frame of the previous op, held until the next op or forget()
        self.imported_packages: set[str] = set()
        self.hashes: dict[tuple[str, int, int], str | None] = {}
        self.dists: Any = None
        self.version_of: dict[str, str | None] = {}
        self.package_dirs: dict[str, str] = {}  # top-level module -> the site-packages folder it was found in
        self.site_index: dict[str, dict[str, str]] = {}

    def _classify(self, filename: str, module: Any) -> Any:
        if not filename or filename.startswith("<"):
            return self.SKIP
        try:
            path = os.path.realpath(filename)
        except (OSError, ValueError):
            return self.SKIP
        if path.startswith(self.skip_roots):
            return self.SKIP
        parts = path.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts:
            top = module.split(".", 1)[0] if isinstance(module, str) and module and module != "__main__" else None
            if top and top not in self.package_dirs:
                last = max(i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages"))
                self.package_dirs[top] = os.sep.join(parts[:last + 1])
            return ("package", top) if top else self.SKIP
        if path.startswith(self.std_roots):
            return self.SKIP
        return ("source", path)

    def note(self, frame: Any) -> None:
        """Record the issuer of the op whose dispatch called from ``frame``.

        Consecutive ops called from one frame (a loop in an optimizer, the autograd engine running
        a whole backward from ``backward()``'s frame) have one issuer: while that frame runs, the
        frames above it are fixed, so the walk is done once. The frame is held (not its id, which
        a later frame may reuse) until another frame calls an op or :meth:`forget`. A generator's
        frame is not cached: resumed from elsewhere, its callers change."""
        own = self.own
        while frame is not None:
            filename = frame.f_code.co_filename
            mine = own.get(filename)
            if mine is None:
                mine = own[filename] = filename.startswith(self.own_roots)
            if not mine:
                break
            frame = frame.f_back
        if frame is None:
            return
        if frame is self.last:
            return
        self.last = None if frame.f_code.co_flags & _RESUMABLE else frame
        cache, skip = self.cache, self.SKIP
        while frame is not None:
            filename = frame.f_code.co_filename  # not the code object: equal code in two files compares equal
            kind = cache.get(filename)
            if kind is None:
                kind = cache[filename] = self._classify(filename, frame.f_globals.get("__name__"))
            if kind is not skip:
                (self.packages if kind[0] == "package" else self.sources).add(kind[1])
                return
            frame = frame.f_back

    def forget(self) -> None:
        """Let go of the held caller frame (its locals) at the end of a traced window."""
        self.last = None

    def package_versions(self) -> dict[str, str | None]:
        """``{top-level module: distribution version}`` of the packages seen (torch excluded)."""
        return self.versions(self.packages)

    def versions(self, packages: set[str]) -> dict[str, str | None]:
        """``{top-level module: distribution version}`` of ``packages`` (each looked up once)."""
        if not packages:
            return {}
        from importlib import metadata  # noqa: PLC0415

        out: dict[str, str | None] = {}
        for top in sorted(packages):
            if top in self.version_of:
                out[top] = self.version_of[top]
                continue
            site = self.package_dirs.get(top)
            found = self._site_versions(site).get(top) if site else None
            if found is not None:
                out[top] = self.version_of[top] = found
                continue
            if self.dists is None:  # the slow way (it reads every distribution's RECORD): only when needed
                try:
                    self.dists = metadata.packages_distributions()
                except Exception:  # noqa: BLE001
                    self.dists = {}
            dists = self.dists
            version = None
            for dist in dists.get(top, []):
                try:
                    version = metadata.version(dist)
                    break
                except Exception:  # noqa: BLE001
                    continue
            out[top] = self.version_of[top] = version
        return out

    def imported(self, exclude: tuple[str, ...] = (), exclude_dirs: tuple[str, ...] = ()) -> dict[str, Any]:
        """What the process has imported so far, from ``sys.modules``: ``modules`` (``{path: SHA-256}``
        of every local file, the ones outside torch, the probes, the standard library and
        site-packages, paths relative to the working directory; ``exclude``: files recorded
        elsewhere, the script; ``exclude_dirs``: folders whose files never count) and
        ``packages`` (``{top-level module: version}`` of every installed package imported, torch
        excluded: ``versions.torch`` has it). Bounded: at most :data:`MAX_MODULES` files, each
        hashed once per size and mtime; ``modules_left_out`` counts those past the bound."""
        skip = tuple(os.path.realpath(p) for p in exclude if p)
        dirs = tuple(os.path.realpath(d) + os.sep for d in exclude_dirs if d)
        files: set[str] = set()
        for name, mod in list(sys.modules.items()):
            try:
                filename = getattr(mod, "__file__", None)
            except Exception:  # noqa: BLE001 - a lazy module proxy may raise anything: not a file
                continue
            if not isinstance(filename, str) or name == "__main__":
                continue
            kind = self.cache.get(filename)
            if kind is None:
                kind = self.cache[filename] = self._classify(filename, name)
            if kind is self.SKIP:
                continue
            if kind[0] == "package":
                if kind[1] != "torch" and not kind[1].startswith(STARTUP_HOOKS):
                    self.imported_packages.add(kind[1])
            elif kind[1] not in skip and not kind[1].startswith(dirs):
                files.add(kind[1])
        modules: dict[str, str] = {}
        left = 0
        for path in sorted(files):
            if len(modules) >= MAX_MODULES:
                left += 1
                continue
            digest = self._hash_cached(path)
            if digest:
                modules[_relative(path)] = digest
        out: dict[str, Any] = {"modules": modules, "packages": self.versions(self.imported_packages)}
        if left:
            out["modules_left_out"] = left
        return out

    def _site_versions(self, site: str) -> dict[str, str]:
        """``{top-level module: version}`` of the distributions installed in one site-packages
        folder, from their ``*.dist-info``/``*.egg-info`` folder names and ``top_level.txt`` (one
        listing and a small file per distribution: ``packages_distributions()`` reads every
        RECORD, seconds with torch installed)."""
        index = self.site_index.get(site)
        if index is not None:
            return index
        index = self.site_index[site] = {}
        try:
            entries = os.listdir(site)
        except OSError:
            return index
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            name, _, rest = entry.rsplit(".", 1)[0].partition("-")
            version = rest.split("-", 1)[0]
            if not name or not version:
                continue
            tops = [name, name.lower(), name.replace("-", "_"), name.lower().replace("-", "_")]
            try:
                with open(os.path.join(site, entry, "top_level.txt"), encoding="utf-8") as f:
                    tops += [line.strip() for line in f if line.strip()]
            except OSError:
                pass
            for top in tops:
                index.setdefault(top, version)
        return index

    def _hash_cached(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        if st.st_size > MAX_HASH_BYTES:
            return f"not hashed: {st.st_size} bytes"
        key = (path, st.st_size, st.st_mtime_ns)
        digest = self.hashes.get(key)
        if digest is None:
            digest = self.hashes[key] = _sha256_file(path)
        return digest

    def source_hashes(self, exclude: str | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        for path in sorted(self.sources):
            if path == exclude:
                continue
            if len(out) >= MAX_SOURCES:
                break
            digest = _sha256_file(path)
            if digest:
                out[_relative(path)] = digest
        return out


def _relative(path: str) -> str:
    """A path relative to the working directory when it is under it (so two checkouts compare)."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return path
