// Answers C++'s device queries on Phantora's fake tensors without a trip through Python dispatch.
//
// Note: [Device queries in C++]
// A FakeTensor's TensorImpl has a Python-defined device (`dispatch_device=True`), so every time C++ asks
// it for its device (argument parsing, TensorIterator, autograd's input metadata: 2.3 to 3.2 times per op
// of a training step), PyTorch calls the Python interpreter's `device` hook. That hook imports `torch`,
// looks up `torch.ops.prim.device.default`, and dispatches it through the mode stack. It reaches HybridMode's
// `__torch_dispatch__`, which answers at once (runtime/dispatch.py, Note [Device queries]). The trip costs
// about 2.7 µs of the simulator's CPU, nearly all of it the trip itself.
//
// This file puts a C++ function in front of that hook. It gives the answer HybridMode would give, and
// only where HybridMode would be the one asked:
// - the tensor's Python object is exactly a FakeTensor;
// - the top of this thread's dispatch-mode stack is the HybridMode that Phantora installed.
// The answer is `meta` while the tensor's fake mode runs a kernel (`in_kernel_invocation`), else the
// tensor's fake device, read from the Python object. Anything else (another mode above HybridMode, a
// tensor of another class, an attribute that is missing) goes to the original hook, unchanged.
//
// The hook is a virtual function of the interpreter's one PyInterpreterVTable object. The shim replaces
// its slot in that object's C++ vtable (read-only after relocation, so its page is made writable) and puts
// the original back at uninstall. The slot's index comes from the Itanium C++ ABI's
// pointer-to-virtual-member, compiled against the installed torch's headers: so x86-64 only. Elsewhere
// install reports failure and every query takes the original path.
//
// The few CPython functions used are declared here rather than taken from Python.h, as in the rest of the
// shim: it builds where Python's development headers are not installed. All are in CPython's stable ABI.
// A torch.device object's layout (PyObject header, then the c10::Device) is checked at install on a
// device object that Python built (phantora_fast_device_layout).

#include <c10/core/TensorImpl.h>
#include <c10/core/impl/PyInterpreter.h>
#include <c10/core/impl/PyInterpreterHooks.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>

extern "C" {
typedef struct _object PyObject;
int PyGILState_Ensure(void);
void PyGILState_Release(int);
PyObject* PyObject_GetAttr(PyObject*, PyObject*);
PyObject* PyUnicode_InternFromString(const char*);
int PyObject_IsTrue(PyObject*);
void PyErr_Clear(void);
void Py_IncRef(PyObject*);
void Py_DecRef(PyObject*);
}

namespace {
struct ObjectHead {  // PyObject's layout in CPython's default build
  intptr_t refcnt;
  void* type;
};

struct DeviceObject {  // torch/csrc/Device.h THPDevice
  ObjectHead head;
  c10::Device device;
};

using DeviceHook = c10::Device (*)(const c10::impl::PyInterpreterVTable*, const c10::TensorImpl*);

void** g_slot = nullptr;             // the vtable entry of PyInterpreterVTable::device
DeviceHook g_original = nullptr;      // what the entry held
PyObject* g_hybrid_mode = nullptr;    // Phantora's HybridMode (a reference is held)
void* g_fake_tensor_type = nullptr;   // FakeTensor
void* g_device_type = nullptr;        // torch.device
PyObject* g_fake_mode_name = nullptr;
PyObject* g_in_kernel_name = nullptr;
PyObject* g_fake_device_name = nullptr;

void* type_of(PyObject* obj) { return reinterpret_cast<ObjectHead*>(obj)->type; }

bool hybrid_mode_on_top() {
  using c10::impl::TorchDispatchModeTLS;
  const int64_t depth = TorchDispatchModeTLS::stack_len();
  if (depth == 0) {
    return false;
  }
  // get_stack_at counts infra modes (FakeTensorMode) first, then the user modes: the last is the one asked first
  return TorchDispatchModeTLS::get_stack_at(depth - 1)->ptr(c10::impl::getGlobalPyInterpreter()) == g_hybrid_mode;
}

// HybridMode's answer for a FakeTensor's Python object, or nothing if an attribute is not what it should be.
std::optional<c10::Device> answer(PyObject* tensor) {
  PyObject* mode = PyObject_GetAttr(tensor, g_fake_mode_name);
  if (mode == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  PyObject* in_kernel = PyObject_GetAttr(mode, g_in_kernel_name);
  Py_DecRef(mode);
  if (in_kernel == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  const int inside = PyObject_IsTrue(in_kernel);
  Py_DecRef(in_kernel);
  if (inside < 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  if (inside) {
    return c10::Device(c10::DeviceType::Meta);
  }
  PyObject* device = PyObject_GetAttr(tensor, g_fake_device_name);
  if (device == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  std::optional<c10::Device> out;
  if (type_of(device) == g_device_type) {
    out = reinterpret_cast<DeviceObject*>(device)->device;
  }
  Py_DecRef(device);
  return out;
}

c10::Device fast_device(const c10::impl::PyInterpreterVTable* self, const c10::TensorImpl* impl) {
  PyObject* tensor = impl->pyobj_slot()->load_pyobj();
  if (tensor != nullptr && type_of(tensor) == g_fake_tensor_type) {
    const int gil = PyGILState_Ensure();
    std::optional<c10::Device> out;
    if (hybrid_mode_on_top()) {
      out = answer(tensor);
    }
    PyGILState_Release(gil);
    if (out) {
      return *out;
    }
  }
  return g_original(self, impl);
}

// The address of PyInterpreterVTable::device's entry in the interpreter's vtable, or null where the ABI is not known.
void** device_slot() {
#if defined(__x86_64__) && defined(__GXX_ABI_VERSION)
  using Member = c10::Device (c10::impl::PyInterpreterVTable::*)(const c10::TensorImpl*) const;
  Member member = &c10::impl::PyInterpreterVTable::device;
  struct { uintptr_t ptr; ptrdiff_t adjust; } raw;
  static_assert(sizeof(raw) == sizeof(member));
  std::memcpy(&raw, &member, sizeof(raw));
  if ((raw.ptr & 1) == 0 || raw.adjust != 0) {  // Itanium: a virtual member is 1 + its vtable offset in bytes
    return nullptr;
  }
  const c10::impl::PyInterpreter* interpreter = c10::impl::getGlobalPyInterpreter();
  if (interpreter == nullptr || interpreter->vtable_ == nullptr) {
    return nullptr;
  }
  void** vtable = *reinterpret_cast<void** const*>(interpreter->vtable_);
  return vtable + (raw.ptr - 1) / sizeof(void*);
#else
  return nullptr;
#endif
}

// The page stays writable: what else it holds may have been writable before, and a read-only page would fault there.
bool store(void** slot, void* value) {
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(page_size - 1));
  if (mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) {
    return false;
  }
  *slot = value;
  return true;
}
}  // namespace

extern "C" {
// torch.device(type, index)'s c10::Device as type * 256 + index, read the way fast_device reads it.
int phantora_fast_device_layout(PyObject* device) {
  const c10::Device d = reinterpret_cast<DeviceObject*>(device)->device;
  return static_cast<int>(d.type()) * 256 + d.index();
}

// Answer device queries of FakeTensors in C++ while `hybrid_mode` is the top dispatch mode (Note [Device
// queries in C++]). Call with the GIL held (ctypes.PyDLL). Returns 1 if installed.
int phantora_fast_device_install(PyObject* hybrid_mode, PyObject* fake_tensor_type, PyObject* device_type) {
  if (g_slot != nullptr) {
    return 1;
  }
  void** slot = device_slot();
  if (slot == nullptr) {
    return 0;
  }
  g_fake_mode_name = PyUnicode_InternFromString("fake_mode");
  g_in_kernel_name = PyUnicode_InternFromString("in_kernel_invocation");
  g_fake_device_name = PyUnicode_InternFromString("_fake_device");
  Py_IncRef(hybrid_mode);
  g_hybrid_mode = hybrid_mode;
  g_fake_tensor_type = fake_tensor_type;
  g_device_type = device_type;
  g_original = reinterpret_cast<DeviceHook>(*slot);
  if (!store(slot, reinterpret_cast<void*>(&fast_device))) {
    return 0;
  }
  g_slot = slot;
  return 1;
}

// Put the original hook back (before the interpreter goes away).
void phantora_fast_device_uninstall() {
  if (g_slot != nullptr && store(g_slot, reinterpret_cast<void*>(g_original))) {
    g_slot = nullptr;
  }
}
}
