// Phantora's fake CUDA device for CPU-only PyTorch builds.
//
// Note: [Why a native shim]
// A CPU build of PyTorch has no CUDA device guard and only a stub of the CUDA hooks, so the
// first autograd edge on a tensor whose device is cuda aborts the process (getDeviceGuardImpl)
// and backward fails ("Cannot access accelerator device when none is available"). This file
// fills both slots with implementations that model a device and its streams but run nothing:
// every CUDA op itself is intercepted in Python (FakeTensorMode) and costed by Phantora.
// State lives here (current device and stream are per thread, as in CUDA) so that PyTorch's C++
// code (the autograd engine switching streams for backward) and Phantora's Python side agree.
// No Python callbacks: C++ never calls into the interpreter, so interpreter exit is safe.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>

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

DeviceIndex resolve(DeviceIndex index) { return index < 0 ? t_device : index; }

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
  Stream getStreamFromGlobalPool(Device d, bool) const override { return getNewStream(d, 0); }
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
  // Events made by PyTorch's C++ code (autograd's cross-stream syncs) are not modelled yet:
  // Python-side torch.cuda.Event and wait_stream are. See docs/runtime.md.
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const Stream&) const override {}
  double elapsedTime(void*, void*, const DeviceIndex) const override { return 0.0; }
};

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
  // pin_memory() on a CPU tensor copies it with this allocator: host memory stays real.
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  bool isPinnedPtr(const void*) const override { return false; }
  const at::Generator& getDefaultGenerator(DeviceIndex) const override {
    static at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
    return generator;
  }
  at::Generator getNewGenerator(DeviceIndex) const override { return at::make_generator<at::CPUGeneratorImpl>(0); }
  void deviceSynchronize(DeviceIndex) const override {}
};

FakeCudaGuard g_guard;
FakeCudaHooks g_hooks;
}  // namespace

extern "C" {
// Returns 1 when both the guard and the hooks are Phantora's afterwards.
int phantora_install(int device_count) {
  if (device_count < 1 || device_count > kMaxDevices) return 0;
  g_device_count = device_count;
  c10::impl::device_guard_impl_registry[static_cast<size_t>(DeviceType::CUDA)].store(&g_guard);
  // getCUDAHooks() caches its stub object on first use (import torch may already have made it);
  // the stub holds nothing but its vtable pointer, so retargeting that pointer makes it ours.
  static_assert(sizeof(FakeCudaHooks) == sizeof(void*), "hooks must hold only a vtable pointer");
  const at::CUDAHooksInterface& current = at::detail::getCUDAHooks();
  if (dynamic_cast<const FakeCudaHooks*>(&current) == nullptr) {
    *reinterpret_cast<void**>(const_cast<at::CUDAHooksInterface*>(&current)) = *reinterpret_cast<void**>(&g_hooks);
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
}
