"""A real int8 graph of the local model, made once from the shipped file and cached on disk.

Why: the shipped file keeps int8 weights but dequantizes them with Cast+Mul, which onnxruntime
folds into fp32 weights at load, so it runs as fp32 (~0.1 ms of CPU per token). onnxruntime's
own `quantize_dynamic` (int8 weights per output channel, activations quantized on each run:
MatMulInteger) runs the same model 1.4-2x faster, within cosine 0.98 of the fp32 vectors.

The same vectors on every x86-64 CPU: onnxruntime multiplies uint8 activations by int8 weights.
With VNNI (vpdpbusd) the products are summed in int32, exactly; on AVX2 and AVX-512 without VNNI
(vpmaddubsw) each pair of products is summed in int16 first and saturates (2·255·127 > 32767),
so the v1 file gave other vectors there (cosine 0.979 between the two on LoCoMo texts; 0.968 to
fp32 for "ok" on an AMD EPYC, 0.982 on VNNI). Known upstream: onnxruntime's quantization guide
(onnxruntime.ai/docs/performance/model-optimizations/quantization.html: reduce-range "is
designed for the U8S8 format on AVX2 and AVX512 (non-VNNI) machines to mitigate saturation
issues. This is not needed on machines supporting VNNI"), microsoft/onnxruntime#5849 and #14642
(a quantized BERT differing between VNNI and non-VNNI Xeons). The remedy used here: with
`reduce_range` the weights stay in [-64, 64], a pair is at most 2·255·64 = 32640 and nothing
saturates, so every CPU computes the exact integer product (on this AVX2 machine the vectors are
bit-identical to those of the exact uint8 x uint8 kernels, the test's oracle). The bit lost costs
accuracy the FFN's down projections (input: 1536 GELU outputs with outliers, one activation
scale per run) cannot afford: they stay fp32. Measured (issue 25), cosine to fp32 min / mean:
0.984 on the test texts, 0.987 / 0.995 over 500 LoCoMo texts (reduce_range on everything: 0.970,
0.980 / 0.991); query CPU +19 % against v1, still 1.45x less than fp32. Also measured: uint8
weights (exact everywhere; 0.977, 0.981; ~10 % slower at 128 tokens, and VNNI's fast path is
u8s8), and v1 read with the session option `session.x64quantprecision` (#12088: int8 weights
beyond ±64 made uint8 at load on non-VNNI CPUs; 0.982, 0.984 / 0.994 at v1's speed here), kept
out because its guarantee would live in every session's options rather than in the file, with
less margin.

How: a child process (the `onnx` package rewriting a 90 MB graph peaks at ≈ 500 MB of RSS,
which a child gives back; a crash there is a failed build, not a dead bot) loads the file with
onnxruntime's extended optimisations (weights folded to fp32, attention and layer norms fused),
saves that graph, and quantizes it. The result is written under a temporary name with its sha256
beside it, then both are renamed into place; a file that does not match its sha256 (half
written, corrupt) is never loaded: it is built again. Builders in one directory take turns
(flock), so replicas sharing a directory build it once. Nothing is fetched: the shipped file,
onnxruntime and onnx are all there is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# Bump when the recipe below changes: the file name carries it, so an old file is not reused.
RECIPE = "ort-extended/quantize_dynamic-qint8-per-channel-reduce-range-fp32-ffn-down/v2"
BUILD_TIMEOUT = 300.0  # seconds for one build (≈3 s of CPU on an idle core)
LOCK_TIMEOUT = BUILD_TIMEOUT + 30.0  # waiting for another process's build
STDERR_TAIL = 300  # characters of a failed build's stderr kept for its log line
_CHUNK = 1 << 20


class QuantizeError(Exception):
    """The int8 graph cannot be had; one line saying why (the caller falls back)."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_name(source_sha: str) -> str:
    """The cached file's name: one per source file, recipe and onnxruntime version."""
    import onnxruntime

    key = f"{source_sha}\n{RECIPE}\n{onnxruntime.__version__}"
    return f"all-MiniLM-L6-v2.qint8.{hashlib.sha256(key.encode()).hexdigest()[:16]}.onnx"


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def is_valid(path: Path) -> bool:
    """The file is there, whole: its sha256 is the one written beside it after it was complete."""
    try:
        expected = sidecar(path).read_text(encoding="ascii").strip()
        return len(expected) == 64 and sha256_of(path) == expected
    except (OSError, UnicodeDecodeError):
        return False


def quantizer_available() -> str | None:
    """None, or why a new file cannot be built here."""
    for module in ("onnx", "onnxruntime"):
        if importlib.util.find_spec(module) is None:
            return f"the {module} package is not installed (pip install -e '.[embeddings]')"
    return None


class Quantizer:
    """Finds or builds the int8 file in the first usable directory; `cancel()` stops a build."""

    def __init__(self, source: Path, source_sha: str, dirs: Sequence[Path]) -> None:
        self.source, self.source_sha, self.dirs = source, source_sha, list(dirs)
        self._child: subprocess.Popen[bytes] | None = None
        self._cancelled = False

    def path(self) -> Path:
        """The int8 file, built first if no directory holds a valid one. Blocking (call it from
        a worker thread); QuantizeError says why when there is none."""
        name = file_name(self.source_sha)
        for directory in self.dirs:
            if is_valid(directory / name):
                return directory / name
        missing = quantizer_available()
        if missing:
            raise QuantizeError(missing)
        unusable: list[str] = []
        for directory in self.dirs:
            try:
                return self._build(directory / name)
            except OSError as exc:  # this directory cannot be written: try the next one
                unusable.append(f"{directory}: {exc.strerror or type(exc).__name__}")
        raise QuantizeError(f"no writable directory for the int8 model ({'; '.join(unusable)})")

    def cancel(self) -> None:
        self._cancelled = True
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()

    def _build(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.parent / ".quantize.lock", lambda: self._cancelled):
            if is_valid(target):  # another process built it while this one waited
                return target
            if target.exists():
                log.warning("local_embedder_rebuild", extra={"fields": {"path": str(target)}})
            if sha256_of(self.source) != self.source_sha:
                raise QuantizeError("the shipped model file does not match its sha256")
            started = time.monotonic()
            work = Path(tempfile.mkdtemp(prefix=".quantize-", dir=target.parent))
            try:
                built = work / "model.onnx"
                self._run_child(built)
                digest = sha256_of(built)
                sidecar(built).write_text(digest + "\n", encoding="ascii")
                for path in (built, sidecar(built)):
                    _fsync(path)
                os.replace(built, target)  # the file first: a sidecar never names a missing file
                os.replace(sidecar(built), sidecar(target))
                _fsync(target.parent)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        fields = {"path": str(target), "seconds": round(time.monotonic() - started, 2)}
        log.info("local_embedder_quantized", extra={"fields": fields})
        return target

    def _run_child(self, out: Path) -> None:
        if self._cancelled:
            raise QuantizeError("cancelled")
        command = [sys.executable, "-m", "bot.embeddings.quantize", str(self.source), str(out)]
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._child = child
        try:
            _, err = child.communicate(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise QuantizeError(f"the int8 build took over {BUILD_TIMEOUT:g} s") from None
        finally:
            self._child = None
        if child.returncode != 0 or not out.is_file():
            lines = err.decode("utf-8", "replace").strip().splitlines()
            tail = lines[-1][-STDERR_TAIL:] if lines else ""
            raise QuantizeError(f"the int8 build failed (exit {child.returncode}): {tail}")


@contextlib.contextmanager
def _locked(path: Path, cancelled: Callable[[], bool]) -> Iterator[None]:
    """An exclusive flock, waited for at most LOCK_TIMEOUT (a holder that dies releases it) or
    until `cancelled()`."""
    with path.open("a+b") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if cancelled():
                    raise QuantizeError("cancelled") from None
                if time.monotonic() > deadline:
                    raise QuantizeError("another process's int8 build did not finish") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def transform(source: Path, out: Path) -> None:
    """The recipe (run in the child): fold and fuse with onnxruntime, then quantize_dynamic
    (why these settings: the module's docstring)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = out.with_name("folded.onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(folded)
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
    quantize_dynamic(
        folded,
        out,
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,  # no int16 saturation without VNNI: the same vectors on any CPU
        nodes_to_exclude=down_projections(folded),
    )
    folded.unlink()


def down_projections(path: Path) -> list[str]:
    """The MatMuls whose constant weight narrows its input (the FFN's 1536 -> 384): kept fp32."""
    import onnx

    model = onnx.load(str(path))
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    return [
        node.name
        for node in model.graph.node
        if node.op_type == "MatMul"
        and len(shape := shapes.get(node.input[1], ())) == 2
        and shape[0] > shape[1]
    ]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bot.embeddings.quantize SOURCE.onnx OUT.onnx", file=sys.stderr)
        return 2
    with contextlib.suppress(OSError):
        os.nice(10)  # a background build: the bot's own threads come first
    logging.basicConfig(level=logging.ERROR)  # the quantizer's advice lines are not errors
    transform(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
