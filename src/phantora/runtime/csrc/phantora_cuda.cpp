// Phantora's fake CUDA device, for CPU and CUDA builds of PyTorch on a machine without a GPU.
//
// Note: [Why a native shim]
// A CPU build of PyTorch has no CUDA device guard and only a stub of the CUDA hooks, so the
// first autograd edge on a tensor whose device is cuda aborts the process (getDeviceGuardImpl)
// and backward fails ("Cannot access accelerator device when none is available"). A CUDA build
// has both, and they call the CUDA runtime, which fails without a driver ("CUDA driver version is
// insufficient for CUDA runtime version"). This file fills both slots with implementations that
// model a device and its streams but run nothing: every CUDA op itself is intercepted in Python
// (FakeTensorMode) and costed by Phantora.
// State lives here (current device and stream are per thread, as in CUDA) so that PyTorch's C++
// code (the autograd engine switching streams for backward) and Phantora's Python side agree.
//
// Note: [Events made in C++]
// PyTorch's C++ code makes CUDA events of its own: autograd syncs a gradient produced on one
// stream with its consumer on another, and a CUDA `c10::ivalue::Future` (DDP's communication
// hook results) makes the waiting stream wait for the stream that completed it. These go through
// the guard's record/block/query/synchronize, which call back into Phantora's Python side (set
// with phantora_set_event_callbacks) so the coordinator sees them like torch.cuda.Event. C++
// event ids are negative, so they never collide with the Python side's positive ids. The
// callbacks are cleared before the interpreter goes away (phantora_clear_event_callbacks).
//
// Note: [DDP's timer]
// DDP's reducer times forward, backward and communication with a timer that c10d's TimerRegistry
// makes for the device type. A CUDA build registers one that creates real CUDA events (cudaEventCreate,
// which fails without a driver); a CPU build registers none for CUDA. Phantora registers, at a higher
// priority, a timer that records nothing and measures nothing: no real time can stand for the
// simulated GPU's, and the statistics only feed DDP's usage logging. On a CPU build the reducer then
// has this timer where it had none.
//
// Note: [What the build knows]
// The hooks object answers two kinds of question. Questions about the device (is there one, how many,
// which is current, synchronize) get the simulated GPU's answers above. Questions about the PyTorch
// build itself (the cuDNN and CUDA runtime versions it was built with) are passed to the hooks the
// build came with: on a CUDA build they read compile-time constants and the cuDNN library, which need
// no GPU or driver (torch.backends.cudnn.version(), and nn.LSTM's check of it); on a CPU build they
// raise PyTorch's own "without ATen_cuda library" error, as before. The rest keeps
// CUDAHooksInterface's CPU-build answers (no cuDNN kernels are chosen: op choice is the same on both).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>

namespace {
using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;
using c10::StreamId;

constexpr int kMaxDevices = 64;
std::atomic<int> g_device_count{1};
thread_local DeviceIndex t_device = 0;
thread_local StreamId t_stream[kMaxDevices] = {0};
std::atomic<StreamId> g_next_stream_id{1};
constexpr StreamId kPoolBase = StreamId{1} << 30;
constexpr StreamId kPoolSize = 32;
std::atomic<StreamId> g_next_pool{0};

DeviceIndex resolve(DeviceIndex index) { return index < 0 ? t_device : index; }

// Note [Events made in C++]: (event id, device, stream id) for record and block.
using EventStreamFn = void (*)(long long, int, long long);
using EventFn = int (*)(long long, int);         // (event id, query?) -> done
using StreamFn = int (*)(int, long long, int);   // (device, stream id or -1 for the device, query?) -> done
using ElapsedFn = double (*)(long long, long long);
std::atomic<EventStreamFn> g_record_event{nullptr};
std::atomic<EventStreamFn> g_block_stream{nullptr};
std::atomic<EventFn> g_event_done{nullptr};
std::atomic<StreamFn> g_stream_done{nullptr};
std::atomic<ElapsedFn> g_elapsed{nullptr};
std::atomic<long long> g_next_event{1};

long long event_id(void* event) { return -static_cast<long long>(reinterpret_cast<intptr_t>(event)); }

struct FakeCudaGuard final : c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }
  Device exchangeDevice(Device d) const override {
    Device old(DeviceType::CUDA, t_device);
    t_device = resolve(d.index());
    return old;
  }
  Device getDevice() const override { return Device(DeviceType::CUDA, t_device); }
  void setDevice(Device d) const override { t_device = resolve(d.index()); }
  void uncheckedSetDevice(Device d) const noexcept override { t_device = resolve(d.index()); }
  Stream getStream(Device d) const override {
    DeviceIndex i = resolve(d.index());
    return Stream(Stream::UNSAFE, Device(DeviceType::CUDA, i), t_stream[i]);
  }
  Stream getDefaultStream(Device d) const override {
    return Stream(Stream::UNSAFE, Device(DeviceType::CUDA, resolve(d.index())), 0);
  }
  // CUDA's pool hands out its 32 streams round robin (c10/cuda/CUDAStream.cpp); so do we, so that
  // code taking a pool stream per call (CUDA futures' callbacks) does not create endless streams.
  Stream getStreamFromGlobalPool(Device d, bool) const override {
    return Stream(Stream::UNSAFE, Device(DeviceType::CUDA, resolve(d.index())), kPoolBase + (g_next_pool++ % kPoolSize));
  }
  Stream getNewStream(Device d, int) const override {
    return Stream(Stream::UNSAFE, Device(DeviceType::CUDA, resolve(d.index())), g_next_stream_id++);
  }
  Stream exchangeStream(Stream s) const override {
    DeviceIndex i = s.device_index();
    StreamId old = t_stream[i];
    t_stream[i] = s.id();
    return Stream(Stream::UNSAFE, s.device(), old);
  }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(g_device_count.load()); }
  // Note [Events made in C++]. The event handle is its id, stored in the pointer slot.
  void record(void** event, const Stream& s, const DeviceIndex, const c10::EventFlag) const override {
    if (*event == nullptr) *event = reinterpret_cast<void*>(static_cast<intptr_t>(g_next_event++));
    if (auto fn = g_record_event.load()) fn(event_id(*event), s.device_index(), s.id());
  }
  void block(void* event, const Stream& s) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for, as in CUDA
    if (auto fn = g_block_stream.load()) fn(event_id(event), s.device_index(), s.id());
  }
  bool queryEvent(void* event) const override {
    auto fn = g_event_done.load();
    return event == nullptr || fn == nullptr || fn(event_id(event), 1) != 0;
  }
  void synchronizeEvent(void* event) const override {
    if (auto fn = g_event_done.load(); fn && event) fn(event_id(event), 0);
  }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream& s) const override {
    auto fn = g_stream_done.load();
    return fn == nullptr || fn(s.device_index(), s.id(), 1) != 0;
  }
  void synchronizeStream(const Stream& s) const override {
    if (auto fn = g_stream_done.load()) fn(s.device_index(), s.id(), 0);
  }
  void synchronizeDevice(const DeviceIndex d) const override {
    if (auto fn = g_stream_done.load()) fn(resolve(d), -1, 0);
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const Stream&) const override {}
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    auto fn = g_elapsed.load();
    return fn && start && end ? fn(event_id(start), event_id(end)) : 0.0;
  }
};

// Note [Pinned host memory]
// pin_memory() copies a host tensor into memory from the hooks' pinned allocator, and is_pinned() asks the
// hooks whether a pointer lies in such memory. Phantora charges a host-to-device copy as asynchronous only
// from pinned memory, as CUDA does (runtime/handlers.py), so a pinned tensor must read as pinned: a data
// loader's `batch.pin_memory()` then `.cuda(non_blocking=True)` lets the host run ahead, where pageable memory
// makes it wait for the stream. The allocator hands out ordinary host memory and remembers each block's
// address range until the block is freed.
std::mutex g_pinned_mutex;
std::map<uintptr_t, size_t> g_pinned_blocks;  // start address -> size in bytes

struct PinnedBlock {
  c10::DataPtr host;
  uintptr_t start;
};

void free_pinned(void* context) {
  auto* block = static_cast<PinnedBlock*>(context);
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned_blocks.erase(block->start);
  }
  delete block;  // frees the host memory
}

struct PinnedHostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr host = c10::GetCPUAllocator()->allocate(bytes);
    void* data = host.get();
    auto start = reinterpret_cast<uintptr_t>(data);
    if (bytes > 0 && data != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned_blocks[start] = bytes;
    }
    return {data, new PinnedBlock{std::move(host), start}, &free_pinned, Device(DeviceType::CPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

bool in_pinned_block(const void* pointer) {
  auto address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto after = g_pinned_blocks.upper_bound(address);
  if (after == g_pinned_blocks.begin()) return false;
  auto block = std::prev(after);
  return address < block->first + block->second;
}

PinnedHostAllocator g_pinned_allocator;

// Note [What the build knows]: the hooks the build came with, seen through their own vtable
// (they hold nothing but it; see phantora_install). Set once, before the hooks become ours.
struct BuildHooksView {
  void* vtable = nullptr;
};
BuildHooksView g_build_hooks_view;
const at::CUDAHooksInterface& build_hooks() {
  return *reinterpret_cast<const at::CUDAHooksInterface*>(&g_build_hooks_view);
}

struct FakeCudaHooks final : at::CUDAHooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  void init() const override {}
  bool hasCUDA() const override { return true; }
  bool hasCUDART() const override { return true; }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(g_device_count.load()); }
  int getNumGPUs() const override { return g_device_count.load(); }
  DeviceIndex current_device() const override { return t_device; }
  void setCurrentDevice(DeviceIndex d) const override { t_device = resolve(d); }
  DeviceIndex getCurrentDevice() const override { return t_device; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    DeviceIndex old = t_device;
    t_device = resolve(d);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  // Note [Pinned host memory]: pin_memory() on a CPU tensor copies it with this allocator; host memory stays real.
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  bool isPinnedPtr(const void* data) const override { return in_pinned_block(data); }
  const at::Generator& getDefaultGenerator(DeviceIndex) const override {
    static at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
    return generator;
  }
  at::Generator getNewGenerator(DeviceIndex) const override { return at::make_generator<at::CPUGeneratorImpl>(0); }
  void deviceSynchronize(DeviceIndex) const override {}
  // Note [What the build knows].
  long versionCuDNN() const override { return build_hooks().versionCuDNN(); }
  long versionRuntimeCuDNN() const override { return build_hooks().versionRuntimeCuDNN(); }
  long versionCuDNNFrontend() const override { return build_hooks().versionCuDNNFrontend(); }
  long versionCUDART() const override { return build_hooks().versionCUDART(); }
  // torch.__config__.show() asks for its CUDA section once hasCUDA() holds. A CPU build's hooks have
  // none; a CUDA build's read the runtime's version through the driver (cudaRuntimeGetVersion fails
  // without one). The section describes a real machine's CUDA runtime, which there is not: none.
  std::string showConfig() const override { return ""; }
};

// Note [DDP's timer].
struct SimulatedGpuTimer final : c10d::Timer {
  explicit SimulatedGpuTimer(c10::Device) {}
  void record(Event) override {}
  std::optional<int64_t> measureDifference(Event, Event) override { return std::nullopt; }
};

// Once per process: a second registration at the same priority would end the process.
void register_ddp_timer() {
  static const bool registered = [] {
    c10d::TimerRegistry()->Register(
        DeviceType::CUDA,
        [](c10::Device device) -> std::unique_ptr<c10d::Timer> { return std::make_unique<SimulatedGpuTimer>(device); },
        c10::REGISTRY_PREFERRED);
    return true;
  }();
  (void)registered;
}

FakeCudaGuard g_guard;
FakeCudaHooks g_hooks;
}  // namespace

extern "C" {
// Returns 1 when both the guard and the hooks are Phantora's afterwards.
int phantora_install(int device_count) {
  if (device_count < 1 || device_count > kMaxDevices) return 0;
  g_device_count = device_count;
  register_ddp_timer();
  c10::impl::device_guard_impl_registry[static_cast<size_t>(DeviceType::CUDA)].store(&g_guard);
  // getCUDAHooks() caches its object on first use (import torch may already have made it): a CPU
  // build's stub, a CUDA build's at::cuda::detail::CUDAHooks. Either holds nothing but its vtable
  // pointer, so retargeting that pointer makes it ours (and the old one still reaches the build's).
  static_assert(sizeof(FakeCudaHooks) == sizeof(void*), "hooks must hold only a vtable pointer");
  const at::CUDAHooksInterface& current = at::detail::getCUDAHooks();
  if (dynamic_cast<const FakeCudaHooks*>(&current) == nullptr) {
    void** vtable_slot = reinterpret_cast<void**>(const_cast<at::CUDAHooksInterface*>(&current));
    g_build_hooks_view.vtable = *vtable_slot;
    *vtable_slot = *reinterpret_cast<void**>(&g_hooks);
  }
  return dynamic_cast<const FakeCudaHooks*>(&at::detail::getCUDAHooks()) != nullptr;
}
int phantora_device_count() { return g_device_count.load(); }
int phantora_current_device() { return t_device; }
void phantora_set_device(int device) { t_device = static_cast<DeviceIndex>(device); }
long long phantora_current_stream(int device) { return t_stream[resolve(static_cast<DeviceIndex>(device))]; }
void phantora_set_current_stream(int device, long long stream_id) {
  t_stream[resolve(static_cast<DeviceIndex>(device))] = stream_id;
}
long long phantora_new_stream_id() { return g_next_stream_id++; }
void phantora_set_event_callbacks(EventStreamFn record, EventStreamFn block, EventFn event_done,
                                  StreamFn stream_done, ElapsedFn elapsed) {
  g_record_event = record;
  g_block_stream = block;
  g_event_done = event_done;
  g_stream_done = stream_done;
  g_elapsed = elapsed;
}
void phantora_clear_event_callbacks() { phantora_set_event_callbacks(nullptr, nullptr, nullptr, nullptr, nullptr); }
}
