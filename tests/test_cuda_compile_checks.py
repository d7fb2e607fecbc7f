"""Compile-time checks of the CUDA kernels, without a GPU: each `.cu` of ops/cuda/ compiled once per session for
sm_80 and sm_90 with `-Xptxas -v` (cached outside the repository by the sources' hash), every `__global__` kernel held
to 0 spill bytes and to the registers and shared memory of its intended occupancy (benchmarks.cuda_resources
OCCUPANCY), and the SASS (`cuobjdump -sass`) of the tensor-core kernels checked for HMMA, LDSM (ldmatrix) and LDGSTS
(cp.async), and their PTX for the mma.sync, ldmatrix and cp.async those come from. Skips when nvcc (or, for the
SASS, cuobjdump) is absent."""

import os
import pathlib
import re
import tempfile

import pytest

from benchmarks.cuda_build import CUDA_DIR, CUDA_SOURCES, find_nvcc
from benchmarks.cuda_resources import (
    OCCUPANCY,
    KernelResources,
    budget,
    compile_cubin,
    find_cuda_tool,
    kernel_label,
    kernel_ptx,
    kernel_resources,
    kernel_sass,
    ptx_path,
)

ARCHS = ("sm_80", "sm_90")
CACHE = pathlib.Path(tempfile.gettempdir()) / f"sparseflow-cubins-{os.getuid()}"


@pytest.fixture(scope="session")
def compiled():
    """{(source, arch): (cubin, {kernel: KernelResources})}, compiled once per session (and per sources' hash)."""
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): the kernels' compile checks need it")
    built = {}
    for source in CUDA_SOURCES:
        for arch in ARCHS:
            cubin, report = compile_cubin(source, arch, CACHE, nvcc)
            built[source, arch] = (cubin, kernel_resources(report))
    return built


def _kernels(compiled, arch) -> list[KernelResources]:
    return [r for (_, a), (_, found) in compiled.items() if a == arch for r in found.values()]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_has_a_stated_occupancy_and_every_entry_a_kernel(compiled, arch):
    bases = {r.base for r in _kernels(compiled, arch)}
    assert len(bases) >= 15  # the block-sparse and embedding-bag kernels were all found
    assert sorted(bases - OCCUPANCY.keys()) == [], "kernels without an intended occupancy in OCCUPANCY"
    assert sorted(OCCUPANCY.keys() - bases) == [], "OCCUPANCY entries naming no kernel"


@pytest.mark.parametrize("arch", ARCHS)
def test_no_kernel_spills_registers(compiled, arch):
    spilling = [f"{r.name}: {r.spill_store_bytes} bytes stored, {r.spill_load_bytes} loaded"
                for r in _kernels(compiled, arch) if r.spill_store_bytes or r.spill_load_bytes]
    assert spilling == []


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_fits_the_registers_and_shared_memory_of_its_occupancy(compiled, arch):
    over = []
    for r in _kernels(compiled, arch):
        b = budget(r.base, arch)
        if r.registers > b.max_registers:
            over.append(f"{r.name}: {r.registers} registers > {b.max_registers} ({b.blocks_per_sm} blocks of "
                        f"{b.threads} threads)")
        if r.shared_bytes > b.max_shared_bytes:
            over.append(f"{r.name}: {r.shared_bytes} bytes of shared memory > {b.max_shared_bytes}")
    assert over == []


def _ptx_instructions(name):
    """The PTX instructions a tensor-core kernel's SASS is assembled from (see _instructions)."""
    if "<float," in name:
        return ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "cvt.rna.tf32.f32", "cp.async.cg.shared.global",
                "cp.async.wait_group")
    kind = "bf16" if "bfloat16" in name else "f16"
    trans = ".trans" if name.startswith("weight_grad") else ""
    return (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32", f"ldmatrix.sync.aligned.m8n8.x4{trans}.shared",
            "cp.async.cg.shared.global", "cp.async.wait_group")


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_core_kernels_ptx_holds_mma_ldmatrix_and_cp_async(compiled, arch):
    # Where cuobjdump is missing the SASS checks skip; the PTX ptxas assembled them from is checked here instead.
    ptx = kernel_ptx(ptx_path(compiled["block_sparse.cu", arch][0]).read_text())
    mma = {name: text for name, text in ptx.items() if "_mma<" in name}
    assert len(mma) == 17  # product_mma: 6 of 16-bit types + 2 TF32; weight_grad_mma: 6 + 3
    missing = [f"{name}: {instruction}" for name, text in mma.items() for instruction in _ptx_instructions(name)
               if instruction not in text]
    assert missing == []
    assert [name for name, text in ptx.items() if "_simt<" in name and "mma.sync" in text] == []


@pytest.fixture(scope="session")
def sass(compiled):
    """{(arch, kernel): SASS text} of the block-sparse kernels."""
    cuobjdump = find_cuda_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (PATH, next to nvcc, $CUDA_HOME/bin): the SASS checks need it")
    return {(arch, name): text for arch in ARCHS
            for name, text in kernel_sass(compiled["block_sparse.cu", arch][0], cuobjdump).items()}


def _instructions(name):
    """What the SASS of a tensor-core kernel must hold: its HMMA form, LDGSTS (cp.async) and, for 16-bit types,
    LDSM (ldmatrix; the weight gradient reads x^T through its transposing form)."""
    if "<float," in name:
        return ("HMMA.1688.F32.TF32", "LDGSTS")
    hmma = "HMMA.16816.F32.BF16" if "bfloat16" in name else "HMMA.16816.F32"
    return (hmma, "LDSM.16.MT88.4" if name.startswith("weight_grad") else "LDSM.16.M88.4", "LDGSTS")


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_core_kernels_use_hmma_fed_by_ldmatrix_and_cp_async(sass, arch):
    kernels = {name: text for (a, name), text in sass.items() if a == arch and "_mma<" in name}
    half = [f"<{t}, {b}>" for t in ("__half", "__nv_bfloat16") for b in (16, 32, 64)]
    assert sorted(kernels) == sorted([f"product_mma{h}" for h in half] + ["product_mma<float, 16>",
                                      "product_mma<float, 32>"] + [f"weight_grad_mma{h}" for h in half]
                                     + [f"weight_grad_mma<float, {b}>" for b in (16, 32, 64)])
    missing = [f"{name}: {instruction}" for name, text in kernels.items() for instruction in _instructions(name)
               if instruction not in text]
    assert missing == []


@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_core_kernels_have_no_tensor_core_instructions(sass, arch):
    simt = {name: text for (a, name), text in sass.items() if a == arch and "_simt<" in name}
    # product_simt and weight_grad_simt: float32 at every block, 16-bit types at 8 only
    assert len(simt) == 12
    assert [name for name, text in simt.items() if "HMMA" in text] == []


REPORT = """\
ptxas info    : Compiling entry function '_ZN10sparseflow12_GLOBAL__N_112product_simtIfLi32EEEvPKT_' for 'sm_80'
ptxas info    : Function properties for _ZN10sparseflow12_GLOBAL__N_112product_simtIfLi32EEEvPKT_
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 8 bytes cumulative stack size, 20608 bytes smem, 428 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN3cub6detail15DeviceScanKernelEv' for 'sm_80'
ptxas info    : Used 40 registers, 6000 bytes smem
ptxas info    : Compiling entry function '_ZN10sparseflow12_GLOBAL__N_112count_uniqueEPKl' for 'sm_80'
ptxas info    : Function properties for _ZN10sparseflow12_GLOBAL__N_112count_uniqueEPKl
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 388 bytes cmem[0]
"""


def test_the_ptxas_report_is_read_per_kernel_leaving_cub_out():
    found = kernel_resources(REPORT)
    assert found == {
        "product_simt<float, 32>": KernelResources("product_simt<float, 32>", "sm_80", 80, 20608, 8, 4, 12),
        "count_unique": KernelResources("count_unique", "sm_80", 10, 0, 0, 0, 0),
    }


def test_a_kernel_name_that_cannot_be_demangled_is_an_error():
    with pytest.raises(ValueError, match="cannot demangle the kernel name _ZN10sparseflow9badE"):
        kernel_resources("ptxas info    : Compiling entry function '_ZN10sparseflow9badE' for 'sm_80'\n"
                         "ptxas info    : Used 8 registers\n")


def test_kernel_labels_drop_namespaces_return_type_and_parameters():
    assert kernel_label("void sparseflow::(anonymous namespace)::product_mma<__half, 64>(__half const*, long, "
                        "int)") == "product_mma<__half, 64>"
    assert kernel_label("void sparseflow::(anonymous namespace)::make_keys(int const*, long)") == "make_keys"


@pytest.mark.parametrize(
    ("kernel", "arch", "registers", "shared"),
    [
        # 3 blocks x 8 warps: 65536 / 24 warps = 2730 per warp -> 85 a thread -> 80 (units of 8); 48 KiB static cap
        ("product_simt", "sm_80", 80, 48 * 1024),
        # 2 blocks: 128 registers; shared memory min(48 KiB, 164 KiB / 2 - 1 KiB)
        ("product_mma", "sm_80", 128, 48 * 1024),
        # 8 blocks of 256: 32 registers; 164 KiB / 8 - 1 KiB = 19968 bytes, on sm_90 228 KiB / 8 - 1 KiB = 28160
        ("check_entries", "sm_80", 32, 19968),
        ("check_entries", "sm_90", 32, 28160),
        # 32 single-thread blocks: 65536 / 32 warps / 32 lanes = 64 registers; 164 KiB / 32 - 1 KiB = 4224
        ("count_unique", "sm_80", 64, 4224),
    ],
)
def test_budgets_follow_from_the_intended_occupancy(kernel, arch, registers, shared):
    b = budget(kernel, arch)
    assert (b.max_registers, b.max_shared_bytes) == (registers, shared)


def test_the_block_sparse_launch_bounds_state_the_same_occupancy():
    source = (CUDA_DIR / "block_sparse.cu").read_text()
    constants = {name: int(value) for name, value in re.findall(r"constexpr int (k\w+BlocksPerSm) = (\d+);", source)}
    threads = int(re.search(r"constexpr int kThreads = (\d+);", source).group(1))
    kernels = re.findall(r"__launch_bounds__\(kThreads, (k\w+BlocksPerSm)\)\s+(\w+)\(", source)
    assert sorted(name for _, name in kernels) == ["product_mma", "product_simt", "weight_grad_mma", "weight_grad_simt"]
    for constant, name in kernels:
        assert OCCUPANCY[name] == (threads, constants[constant]), name
