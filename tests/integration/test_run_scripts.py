"""Real scripts, unmodified, end to end under `phantora run`."""

import json
import re

import pytest
import torch

from conftest import REPO, SCRIPTS


@pytest.mark.every_build
def test_cuda_api_surface(phantora):
    run = phantora(str(SCRIPTS / "cuda_api_probe.py"))
    assert run.code == 0, run.stderr
    seen = run.tagged_json("PROBE")
    assert seen["available"] and seen["count"] == 1 and seen["name"] == "NVIDIA H200"
    assert seen["capability"] == [9, 0] and seen["sms"] == 132 and seen["bf16"]
    # the host runs ahead of the GPU; synchronize and events see the GPU's time
    assert seen["launch_s"] < seen["sync_s"]
    assert abs(seen["event_ms"] / 1e3 - seen["sync_s"]) < 0.5 * seen["sync_s"]
    # 10 bf16 4096^3 GEMMs: 1.37 TFLOP, at most ~1 PFLOP/s peak -> at least 1.3 ms
    assert seen["event_ms"] > 1.3
    assert 0 < seen["event_after_idle_ms"] < 0.5 * seen["event_ms"]  # one GEMM, not the 10 ms idle gap
    # independent streams overlap, ordered ones do not
    # two GEMMs that each fill the GPU run one after the other on two streams too (coordinator Note
    # [One kernel at a time]): no faster than when ordered
    assert seen["two_streams_s"] >= 0.95 * seen["ordered_streams_s"]
    assert seen["stream_is_current"]
    # placeholders (Note [Placeholder values])
    assert seen["item"] == 0.0 and seen["finite_all"] is True and seen["any"] is False
    assert seen["nonzero_shape"] == [16, 2] and seen["cpu_copy"] == [[0.0, 0.0], [0.0, 0.0]]
    assert seen["tolist"] == [0] * 16 and seen["tolist_us"] < 2 * seen["item_us"]  # one read, not 16
    # placeholders for the unknown norms, the real sum of a known arange; three reads, as three item()s
    assert seen["scalars_to_tensor"] == ["cpu", 0.0, 0.0, 6.0] and seen["scalars_to_tensor_us"] > 3 * seen["item_us"]
    assert seen["round_robin_counts"] == [8] * 8 and seen["arange_sum"] == 45  # real: built from arguments alone
    assert "expected mat1 and mat2 to have the same dtype" in seen["mixed_dtype_gemm"]
    assert seen["pinned"] == [True, True, False, True]
    assert seen["pinned_copy_us"] < 100 < 1000 < seen["pageable_copy_us"]  # 10 GEMMs queued: >1.3 ms
    assert seen["empty_copy_us"] < 100
    # memory API backed by the allocator model
    assert seen["alloc_delta"] == 1 << 30 and seen["after_free"] == 0 and seen["peak_delta"] == 1 << 30
    assert seen["reserved_ge_alloc"] and seen["mem_info_ok"] and seen["stats_keys"]
    assert seen["grad_dtype"] == "torch.float32" and seen["param_device"] == "cuda:0"
    assert seen["compiled_runs"] == [2, 256]
    assert seen["big_seed"] == 2**64 - 5
    assert seen["graph_type_named"] == "torch.cuda.graphs.CUDAGraph | None"
    for name, error in seen["unsupported_errors"].items():  # named, never a CUDA call or a missing binding
        assert error.startswith("phantora: ") and "is not supported yet" in error and name in error, (name, error)
    assert run.summary["compile"]["regions"] == 1 and not run.summary["compile"]["eager_regions"]
    assert not any("torch.compile" in w for w in run.summary["warnings"])
    assert run.summary["placeholder_reads"][".item()"] >= 1


def test_a_block_used_on_another_stream_returns_once_the_gpu_passed_that_use(phantora):
    """models/memory.py Note [Cross-stream frees between syncs]: a 64 MiB block made on a side stream,
    read on the default stream (`record_stream`) and freed, twelve times over. The GPU keeps up with the
    host, so each block is reusable by the next allocation although the host never synchronizes: two
    blocks at most (the one in use and one the GPU may still be reading). Were the model to wait for a
    sync, each round would reserve a new 64 MiB segment. Then with the GPU behind and the host waiting on
    an event after each use (FSDP1's rate limiter): the event completes the free."""
    run = phantora(str(SCRIPTS / "cross_stream_frees_probe.py"))
    assert run.code == 0, run.stderr
    seen = run.tagged_json("PROBE")
    reserved, event_reserved = seen["reserved_mib"], seen["event_reserved_mib"]
    assert reserved[-1] - reserved[0] <= 64, reserved
    assert len(set(reserved[2:])) == 1, reserved
    assert len(set(event_reserved)) == 1, event_reserved


def test_oom_on_small_gpu_fits_on_large(phantora):
    too_big = phantora(str(SCRIPTS / "oom_probe.py"), "--gib", "100", gpu="h100")
    assert too_big.code != 0
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB" in too_big.stderr
    assert too_big.stderr.strip().splitlines()[-1].startswith("phantora: error: the program exited with code 1")
    assert too_big.summary["ooms"] == 1 and not too_big.summary["complete"]  # partial results written
    fits = phantora(str(SCRIPTS / "oom_probe.py"), "--gib", "100", gpu="h200")
    assert fits.code == 0, fits.stderr
    assert "FIT 100 GiB" in fits.stdout
    caught = phantora(str(SCRIPTS / "oom_probe.py"), "--gib", "100", "--catch", gpu="h100")
    assert caught.code == 0 and "CAUGHT after 7" in caught.stdout


@pytest.mark.every_build
def test_example_is_deterministic_and_prints_simulated_times(phantora):
    args = (str(REPO / "examples" / "nanogpt_train.py"), "--layers", "2", "--steps", "3", "--batch", "4")
    first, second = phantora(*args), phantora(*args)
    assert first.code == 0, first.stderr
    times = re.findall(r"step \d: .* ([\d.]+) ms", first.stdout)
    assert len(times) == 3 and all(float(t) > 0 for t in times)
    assert first.stdout == second.stdout  # same inputs, same simulated numbers
    summary = first.summary
    assert summary["complete"] and summary["kernels"] > 100 and 0 < summary["gpu_busy_fraction"] <= 1
    assert (first.out_dir / "report.png").exists() and (first.out_dir / "trace.json").exists()


def test_script_error_is_reported_with_nonzero_exit(phantora, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import torch\nx = torch.ones(3, device='cuda')\nraise ValueError('boom')\n")
    run = phantora(str(script))
    assert run.code == 1
    assert "ValueError: boom" in run.stderr
    assert (run.out_dir / "summary.json").exists()


def test_argv_and_main_are_the_users(phantora, tmp_path):
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint('ARGV', sys.argv[1:], __name__)\n")
    run = phantora(str(script), "--lr", "3", "x y")
    assert run.code == 0, run.stderr
    assert "ARGV ['--lr', '3', 'x y'] __main__" in run.stdout


def test_custom_op_without_fake_impl_names_the_op(phantora):
    run = phantora(str(SCRIPTS / "custom_op.py"))
    assert run.code == 1
    assert "operator phantora_test.scale.default has no fake (meta) implementation" in run.stderr


def test_8b_model_with_adamw_fits_in_small_host_memory(phantora):
    """An 8B-parameter Llama with AdamW state: ~145 GB on the simulated GPU (it would OOM on an H200,
    so a B200), well under 4 GB of host RSS."""
    run = phantora(str(REPO / "benchmarks" / "workloads" / "llama_train.py"), "--parallel", "none",
                   "--dim", "4096", "--n-layers", "32", "--n-heads", "32", "--n-kv-heads", "8",
                   "--ffn-dim", "14336", "--seq", "64", "--batch", "1", "--steps", "4", gpu="b200")
    assert run.code == 0, run.stderr[-2000:]
    result = next(json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"script"'))
    assert result["params"] > 8.0e9
    assert result["max_mem_alloc_gib"] > 4 * 8.0e9 * 4 / 2**30 * 0.95  # params, grads, 2 Adam states in fp32
    assert run.summary["simulator_peak_rss_gib"] < 4.0


def test_fused_gpu_kernels_arrive_whole(phantora):
    """F.rms_norm calls _fused_rms_norm, which a CUDA build runs as one kernel each way; a CPU build has only
    its decomposition (pow, mean, rsqrt, five multiplications). cuDNN attention takes grouped key/value heads
    as they are; repeating them would add copies and reductions a GPU does not run, and keep the copies.
    Under autocast, attention on float32 inputs runs in bf16 (cuDNN), as autocast casts it on a GPU; under
    `sdpa_kernel(FLASH_ATTENTION)` it runs flash attention."""
    run = phantora(str(SCRIPTS / "fused_kernels_probe.py"))
    assert run.code == 0, run.stderr[-2000:]
    events = json.loads((run.out_dir / "trace.json").read_text())["traceEvents"]
    kernels = [e["name"] for e in events if e.get("ph") == "X" and e.get("cat") not in ("host_blocked", "nccl_wait")
               and e.get("tid", 0) != 0]
    assert kernels.count("aten._fused_rms_norm.default") == 1
    assert kernels.count("aten._fused_rms_norm_backward.default") == 1
    assert not {"aten.pow.Tensor_Scalar", "aten.rsqrt.default", "aten.mean.dim"} & set(kernels)
    assert kernels.count("aten._scaled_dot_product_cudnn_attention.default") == 2
    assert kernels.count("aten._scaled_dot_product_flash_attention.default") == 1
    assert "aten._scaled_dot_product_efficient_attention.default" not in kernels
    assert kernels.count("aten._scaled_dot_product_cudnn_attention_backward.default") == 1
    assert not {"aten.clone.default", "aten.sum.dim_IntList", "aten.repeat_interleave.self_int"} & set(kernels)
    probe = run.tagged_json("PROBE")
    assert probe["k_grad"] == [2, 8, 1024, 128]
    assert probe["autocast_dtype"] == "torch.bfloat16"
    lse_bytes = 2 * 32 * 1024 * 4
    assert probe["attention_saved_bytes"] <= probe["output_bytes"] + lse_bytes + (1 << 20)


def test_modules_with_fake_parameters_deep_copy_as_on_a_gpu(phantora):
    """A pipeline split deep-copies the whole model (TorchTitan): the copy's tensors are new, on the same
    device, and a GPU module's copy takes GPU memory (dispatch Note [Copying fake tensors])."""
    run = phantora(str(SCRIPTS / "deepcopy_probe.py"))
    assert run.code == 0, run.stderr[-2000:]
    seen = run.tagged_json("PROBE")
    assert seen["new_parameter"] and seen["requires_grad"]
    assert seen["shapes"] == [[2048, 1024], [2048, 1024]] and seen["devices"] == ["cpu", "cuda:0"]
    assert seen["gpu_copy_bytes"] >= (64 * 64 + 64) * 4


def test_a_programs_own_triton_kernel_runs_as_an_unmodelled_kernel(phantora):
    """runtime/triton_kernels.py Note [Triton kernels]: no GPU driver is needed; each launch is one kernel,
    listed as unmodelled, and the values of what it may write are forgotten."""
    pytest.importorskip("triton")
    run = phantora(str(SCRIPTS / "triton_probe.py"))
    assert run.code == 0, run.stderr[-2000:]
    seen = run.tagged_json("PROBE")
    assert seen["before"] == [1, 2, 3] and seen["after"] == [0, 0, 0]  # a placeholder: the kernel wrote it
    assert run.summary["generic_ops"] == {"triton.add_one_kernel": 2}
    events = json.loads((run.out_dir / "trace.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("ph") == "X"].count("triton.add_one_kernel") == 2


def test_two_host_threads_issue_gpu_work_at_once(phantora):
    """dispatch Note [Host threads]: a forward in one thread beside a backward in another (DualPipeV)."""
    run = phantora(str(SCRIPTS / "threads_probe.py"))
    assert run.code == 0, run.stderr[-2000:]
    seen = run.tagged_json("PROBE")
    assert seen == {"errors": [], "devices": ["cuda:0"], "grads": 50}


def test_cuda_build_paths_stay_off_the_real_device(phantora):
    """On a CUDA build of PyTorch, C++ code asks the build's hooks and kernels what a CPU build's stubs
    answer: the cuDNN version (nn.LSTM, and the SDPA backend choice of ATen's composite attention) and the
    build's configuration. None may fail or need the real CUDA runtime ("CUDA driver version is
    insufficient"); a CPU build runs the same program too."""
    run = phantora(str(SCRIPTS / "cuda_build_paths.py"))
    assert run.code == 0, run.stderr
    seen = run.tagged_json("BUILD")
    assert seen["lstm_out"] == [5, 3, 64] and seen["sdpa_out"] == [2, 4, 16, 64]
    if seen["cuda_build"]:
        assert seen["cudnn_version"] == torch.backends.cudnn.version() > 0  # the build's own, as on a GPU
    else:
        assert seen["cudnn_version"] is None
    assert "PyTorch built with" in seen["config"] and "CUDA Runtime" not in seen["config"]


def test_device_queries_from_cpp_are_answered_without_python_dispatch(phantora):
    """Note [Device queries in C++]: with Phantora's mode on top, C++ gets a fake tensor's device from the shim
    (Phantora's mode is never asked); a program's own mode above it is still asked, and the answers are right."""
    run = phantora(str(SCRIPTS / "device_queries_probe.py"))
    assert run.code == 0, run.stderr
    seen = run.tagged_json("PROBE")
    assert seen["is_cuda"] and not seen["is_cpu"] and not seen["is_meta"]
    assert seen["grad_is_cuda"] and seen["grad_device"] == "cuda:0"
    assert seen["hybrid_mode_asked"] == 0
    assert seen["is_cuda_under_a_mode"] and seen["asked_the_programs_mode"] >= 1
