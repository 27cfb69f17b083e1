"""What NCCL result codes and CUDA error numbers in a log line mean, in plain words."""
from __future__ import annotations

from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.kb.record import record

# ncclResult_t (nccl.h): value, name, the text ncclGetErrorString prints, what it usually means
NCCL_RESULTS = (
    (1, "ncclUnhandledCudaError", "unhandled cuda error",
     "a CUDA call inside NCCL failed: a broken GPU or driver, a CUDA error from an earlier kernel, or GPUs "
     "that cannot reach each other (P2P, fabric manager)"),
    (2, "ncclSystemError", "unhandled system error",
     "a system or library call failed (socket, shared memory, malloc, IB verbs): often a network or /dev/shm "
     "problem, or a peer that exited"),
    (3, "ncclInternalError", "internal error - please report this issue",
     "an internal NCCL check failed: often mismatched NCCL versions or a plugin between ranks"),
    (4, "ncclInvalidArgument", "invalid argument",
     "a bad value reached NCCL: a null or wrong-device buffer, a rank outside the communicator"),
    (5, "ncclInvalidUsage", "invalid usage",
     "NCCL was used in a way it does not allow: two ranks on the same GPU (duplicate GPU), a communicator "
     "used from the wrong device"),
    (6, "ncclRemoteError", "remote process exited or there was a network error",
     "a peer went away: another rank died first or the network between them failed; look for the rank "
     "that failed earliest"),
    (7, "ncclInProgress", "NCCL operation in progress", "a non-blocking NCCL call has not finished yet"),
    # newest nccl.h.in; known here by its name only (the second field never occurs in lower-cased text)
    (8, "ncclTimeout", "ncclTimeout",
     "an NCCL operation ran past its time limit: a peer stopped taking part; look for the rank that failed or "
     "stalled first"),
)

# cudaError_t (driver_types.h): number -> (name, the runtime's message, what it usually means)
CUDA_ERRORS = {
    1: ("cudaErrorInvalidValue", "invalid argument", "a bad argument to a CUDA call"),
    2: ("cudaErrorMemoryAllocation", "out of memory", "the GPU ran out of memory"),
    3: ("cudaErrorInitializationError", "initialization error",
        "CUDA could not start: driver problem, or CUDA used in a forked child after the parent touched it"),
    35: ("cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version",
         "the driver is older than the CUDA toolkit torch was built with"),
    46: ("cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable",
         "the GPU is in exclusive-process mode and taken, or not available to this container"),
    100: ("cudaErrorNoDevice", "no CUDA-capable device is detected", "no GPU is visible to the process"),
    101: ("cudaErrorInvalidDevice", "invalid device ordinal",
          "a device index at or beyond the number of visible GPUs"),
    209: ("cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device",
          "the build does not include this GPU's architecture"),
    217: ("cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices",
          "the two GPUs cannot use P2P (PCIe topology, IOMMU, virtualisation)"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered",
          "a kernel read or wrote outside its memory; the CUDA context is now unusable"),
    701: ("cudaErrorLaunchOutOfResources", "too many resources requested for launch", "a kernel asked for too much"),
    702: ("cudaErrorLaunchTimeout", "the launch timed out and was terminated", "a kernel ran past the watchdog"),
    710: ("cudaErrorAssert", "device-side assert triggered",
          "a kernel assertion failed, typically an index out of range (labels, embeddings)"),
    719: ("cudaErrorLaunchFailure", "unspecified launch failure", "a kernel crashed"),
    802: ("cudaErrorSystemNotReady", "system not yet initialized",
          "the GPU system is not ready: on NVSwitch machines, the fabric manager is not running"),
    803: ("cudaErrorSystemDriverMismatch", "system has unsupported display driver / cuda driver combination",
          "the kernel driver and the user-space CUDA driver are different versions"),
    999: ("cudaErrorUnknown", "unknown error", "an unspecified CUDA failure, often after a GPU fell off the bus"),
}
# enum ibv_wc_status (libibverbs verbs.h) as NCCL's net_ib.cc prints it in "NET/IB : Got completion [from peer
# %s ]with error %d, ..." (NCCL 2.4-2.18), "... with status=%d opcode=%d ..." (2.19+) or "status=IBV_WC_..(%d)"
# (newest); only the ones seen in training
IB_COMPLETION = {
    1: ("IBV_WC_LOC_LEN_ERR", "a received message was longer than the buffer posted for it: ranks disagree on "
        "sizes (mismatched NCCL versions or settings between nodes), or the two ports run different MTUs"),
    4: ("IBV_WC_LOC_PROT_ERR", "local protection error: the NIC could not use a registered buffer, often GPUDirect "
        "RDMA trouble (nvidia-peermem not loaded, ACS/IOMMU on the PCIe path)"),
    5: ("IBV_WC_WR_FLUSH_ERR", "work request flushed: the connection was already broken by an earlier error, so "
        "look for the first failure (a peer that died or an earlier completion error)"),
    8: ("IBV_WC_LOC_ACCESS_ERR", "local access error on a registered buffer (GPUDirect RDMA or memory registration)"),
    10: ("IBV_WC_REM_ACCESS_ERR", "remote access error: the peer rejected the access, its memory registration "
         "differs or was released (a peer restarting or a GPUDirect problem on its side)"),
    12: ("IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded: the peer's NIC stopped acknowledging, because "
         "the peer process died or the fabric dropped packets (a bad link or port, RoCE without lossless "
         "settings, a wrong NCCL_IB_GID_INDEX, an MTU mismatch)"),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "receiver-not-ready retries exceeded: the peer did not post its receives in "
         "time, usually a stalled or dead peer"),
}
_IB_STATUS = _lazy(r"Got completion (?:from peer \S{1,120} )?with (?:error |status=)(?:IBV_WC_\w{1,30}\()?(\d{1,3})\b")

_CUDA_BY_NAME = {name: (num, name, msg, why) for num, (name, msg, why) in CUDA_ERRORS.items()}
_CUDA_BY_MESSAGE = {msg.lower(): (num, name, msg, why) for num, (name, msg, why) in CUDA_ERRORS.items()
                    if num not in (1, 2)}  # "invalid argument" and "out of memory" are too common to read alone

_NCCL_NAME = _lazy(r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|"
                        r"RemoteError|InProgress|Timeout))\b")
# NCCL's INFO trace of a failing call: "transport/net.cc:1298 -> 6"
_NCCL_TRACE = _lazy(r"\b[\w/]{1,300}\.(?:cc|h|cu|cpp):\d+ -> (\d)\b")  # bounded: a long token is no rescan
_CUDA_NAME = _lazy(r"\b(cudaError\w+|CUDA_ERROR_\w+)\b")
_CUDA_NUMBER = _lazy(r"(?:Cuda failure|CUDA error|cudaError|error code|code=|CUDA_ERROR)\D{0,12}?\b(\d{1,3})\b")


@record(frozen=True)
class Meaning:
    code: str  # "ncclSystemError (2)", "cudaErrorInvalidDevice (101)"
    text: str  # what it usually means

    def __str__(self) -> str:
        return f"{self.code}: {self.text}"


def _nccl(value: int) -> Meaning | None:
    for num, name, _printed, why in NCCL_RESULTS:
        if num == value:
            return Meaning(f"{name} ({num})", why)
    return None


def _nccl_traces(text: str):
    """NCCL's "file.cc:123 -> 2" return traces, read only around each arrow: a long line is not rescanned."""
    at, done = text.find(" -> "), 0
    while at >= 0:
        m = _NCCL_TRACE.search(text, max(done, at - 320), at + 8)
        if m is not None:
            yield m
            done = m.end()
        at = text.find(" -> ", at + 4)


def explain(text: str) -> list[Meaning]:
    """Meanings of the NCCL results and CUDA errors a line names, by name, printed message or number."""
    found: dict[str, Meaning] = {}
    names = {n for n in _NCCL_NAME.findall(text)}
    lower = text.lower()
    for num, name, printed, why in NCCL_RESULTS:
        if name in names or (printed in lower and ("nccl" in lower)):
            found[name] = Meaning(f"{name} ({num})", why)
    for m in _nccl_traces(text):
        meaning = _nccl(int(m.group(1)))
        if meaning is not None:
            found.setdefault(meaning.code.split()[0], meaning)
    for m in _CUDA_NAME.finditer(text):
        name = m.group(1)
        if name.startswith("CUDA_ERROR_"):  # the driver API spells the same errors this way
            name = "cudaError" + "".join(part.capitalize() for part in name[len("CUDA_ERROR_"):].split("_"))
        hit = _CUDA_BY_NAME.get(name)
        if hit is not None:
            found[hit[1]] = Meaning(f"{hit[1]} ({hit[0]})", hit[3])
    for message, hit in _CUDA_BY_MESSAGE.items():
        if message in lower and hit[1] not in found:
            found[hit[1]] = Meaning(f"{hit[1]} ({hit[0]})", hit[3])
    for m in _IB_STATUS.finditer(text):
        hit = IB_COMPLETION.get(int(m.group(1)))
        if hit is not None:
            found[hit[0]] = Meaning(f"{hit[0]} ({m.group(1)})", hit[1])
    for m in _CUDA_NUMBER.finditer(text):
        num = int(m.group(1))
        if num in CUDA_ERRORS and num not in (1, 2) and CUDA_ERRORS[num][0] not in found:
            name, _msg, why = CUDA_ERRORS[num]
            found[name] = Meaning(f"{name} ({num})", why)
    return list(found.values())
