// Counts the Python function calls a thread makes outside code that is not the program's.
//
// Note: [Counting the program's Python calls]
// `--host-time counted` charges the host clock a constant per Python function call the program makes
// between intercepted calls (runtime/python_calls.py). Counting must be deterministic and cheap, so
// it is a C profile function (PyEval_SetProfile), not a Python one: each call event costs a few tens
// of nanoseconds here instead of a Python function call.
//
// Some code runs in the simulated process that would not run on the real one: Phantora's own
// interception layer, PyTorch's fake-tensor machinery, the registry lookups PyTorch makes because a
// dispatch mode is active. Other code has a host cost of its own in the model (a library call whose
// wrapper Phantora installs: the wrapper is Phantora's code). Such a function is "outside": when the
// program calls it (its caller is not outside code), neither it nor anything it calls is counted: the
// thread remembers that frame and counts nothing until the same frame returns (a generator's yield
// returns too). Outside code that outside code calls is no such entry: Phantora's launcher runs the
// program's script, whose calls count; and what the interception layer calls is not charged anyway
// (runtime/python_calls.py charges only the calls between the layer's entries).
//
// Which code is outside is decided once per code object, from the start of its file name
// (phantora_add_outside_path); the decision is cached with a reference to the code object, so its
// address is never reused for another while cached.
// The count is per thread (the autograd engine's device threads run hooks and custom backward
// functions); a thread counts from its call of phantora_count_python_calls_on_this_thread().
//
// The few CPython functions used are declared here rather than taken from Python.h, so that the shim
// builds where Python's development headers are not installed; all are in CPython's stable ABI.

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
typedef struct _object PyObject;
typedef int (*Py_tracefunc)(PyObject*, void*, int, PyObject*);
void PyEval_SetProfile(Py_tracefunc, PyObject*);
PyObject* PyFrame_GetCode(void*);
PyObject* PyFrame_GetBack(void*);
PyObject* PyObject_GetAttrString(PyObject*, const char*);
const char* PyUnicode_AsUTF8(PyObject*);
void PyErr_Clear();
void Py_IncRef(PyObject*);
void Py_DecRef(PyObject*);
}

namespace {

constexpr int kPyTraceCall = 0;    // PyTrace_CALL
constexpr int kPyTraceReturn = 3;  // PyTrace_RETURN

std::vector<std::string> g_outside_paths;
std::unordered_map<PyObject*, bool> g_outside_code;
thread_local void* t_outside_frame = nullptr;
thread_local uint64_t t_calls = 0;

bool is_outside(PyObject* code) {
  auto found = g_outside_code.find(code);
  if (found != g_outside_code.end()) return found->second;
  bool outside = false;
  PyObject* name = PyObject_GetAttrString(code, "co_filename");
  const char* file = name == nullptr ? nullptr : PyUnicode_AsUTF8(name);
  if (file == nullptr) {
    PyErr_Clear();
  } else {
    for (const std::string& path : g_outside_paths) {
      if (std::strncmp(file, path.c_str(), path.size()) == 0) {
        outside = true;
        break;
      }
    }
  }
  if (name != nullptr) Py_DecRef(name);
  Py_IncRef(code);
  g_outside_code.emplace(code, outside);
  return outside;
}

// Whether `frame`'s caller is outside code: Phantora calling its own functions, or running the program (its
// launcher calls the script, whose frames are then the program's), is no entry into outside code.
bool called_from_outside(void* frame) {
  PyObject* caller = PyFrame_GetBack(frame);
  if (caller == nullptr) return false;
  PyObject* code = PyFrame_GetCode(caller);
  bool outside = is_outside(code);
  Py_DecRef(code);
  Py_DecRef(caller);
  return outside;
}

int count_call(PyObject*, void* frame, int what, PyObject*) {
  if (what == kPyTraceCall) {
    if (t_outside_frame != nullptr) return 0;
    PyObject* code = PyFrame_GetCode(frame);
    if (is_outside(code)) {
      if (!called_from_outside(frame)) t_outside_frame = frame;
    } else {
      ++t_calls;
    }
    Py_DecRef(code);
  } else if (what == kPyTraceReturn && frame == t_outside_frame) {
    t_outside_frame = nullptr;
  }
  return 0;
}

}  // namespace

extern "C" {
// Code in files whose path starts with `path` is outside (see the Note). Call with the GIL held.
void phantora_add_outside_path(const char* path) { g_outside_paths.emplace_back(path); }
// Start counting on the calling thread (it must hold the GIL: load this library as ctypes.PyDLL).
void phantora_count_python_calls_on_this_thread() { PyEval_SetProfile(count_call, nullptr); }
void phantora_stop_counting_python_calls_on_this_thread() { PyEval_SetProfile(nullptr, nullptr); }
// The calling thread's count so far.
uint64_t phantora_python_calls() { return t_calls; }
}
