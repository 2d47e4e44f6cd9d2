// Charges the host clock for each call of a library function that has a measured price.
//
// Note: [Pricing library Python in C]
// runtime/python_prices.py charges every call of a framework library's Python function (DeepSpeed's hooks,
// Megatron-core's layers) the own time that function took per call on the reference host. Seeing every call
// must be deterministic and cheap, so it is a C profile function (PyEval_SetProfile), not a Python one: a
// call event costs a hash lookup here; only a priced call reaches Python, to charge the clock.
//
// A code object's price is decided once, by the Python `pricer` (code -> ns, 0 for no price), and cached
// with a reference to the code object, so that its address is never reused for another while cached.
// A priced call then calls `charge(ns)`. CPython does not report the calls that a profile function makes
// itself, so neither the pricer's nor the charge's Python is seen here.
// Profiling is per thread: a thread is priced from its call of phantora_price_python_on_this_thread()
// (the main thread at install, any other when it first enters the interception layer).
//
// The few CPython functions used are declared here rather than taken from Python.h, so that the shim
// builds where Python's development headers are not installed; all are in CPython's stable ABI.

#include <cstdint>
#include <unordered_map>

extern "C" {
typedef struct _object PyObject;
typedef int (*Py_tracefunc)(PyObject*, void*, int, PyObject*);
void PyEval_SetProfile(Py_tracefunc, PyObject*);
PyObject* PyFrame_GetCode(void*);
PyObject* PyObject_CallFunctionObjArgs(PyObject*, ...);
PyObject* PyLong_FromLongLong(long long);
long long PyLong_AsLongLong(PyObject*);
void PyErr_Clear();
void Py_IncRef(PyObject*);
void Py_DecRef(PyObject*);
}

namespace {

constexpr int kPyTraceCall = 0;  // PyTrace_CALL

PyObject* g_pricer = nullptr;  // code -> int ns (a reference is held)
PyObject* g_charge = nullptr;  // int ns -> None (a reference is held)
std::unordered_map<PyObject*, long long> g_prices;

long long price_of(PyObject* code) {
  auto found = g_prices.find(code);
  if (found != g_prices.end()) return found->second;
  long long ns = 0;
  PyObject* result = PyObject_CallFunctionObjArgs(g_pricer, code, nullptr);
  if (result == nullptr) {
    PyErr_Clear();
  } else {
    ns = PyLong_AsLongLong(result);
    if (ns < 0) {
      PyErr_Clear();
      ns = 0;
    }
    Py_DecRef(result);
  }
  Py_IncRef(code);
  g_prices.emplace(code, ns);
  return ns;
}

int price_call(PyObject*, void* frame, int what, PyObject*) {
  if (what != kPyTraceCall) return 0;
  PyObject* code = PyFrame_GetCode(frame);
  const long long ns = price_of(code);
  Py_DecRef(code);
  if (ns > 0) {
    PyObject* amount = PyLong_FromLongLong(ns);
    PyObject* result = amount == nullptr ? nullptr : PyObject_CallFunctionObjArgs(g_charge, amount, nullptr);
    if (result == nullptr) PyErr_Clear();
    else Py_DecRef(result);
    if (amount != nullptr) Py_DecRef(amount);
  }
  return 0;
}

}  // namespace

extern "C" {
// The pricer and the charge (see the Note). Call with the GIL held (load this library as ctypes.PyDLL).
// Prices cached under an earlier pricer are forgotten.
void phantora_set_python_pricing(PyObject* pricer, PyObject* charge) {
  Py_IncRef(pricer);
  Py_IncRef(charge);
  if (g_pricer != nullptr) Py_DecRef(g_pricer);
  if (g_charge != nullptr) Py_DecRef(g_charge);
  g_pricer = pricer;
  g_charge = charge;
  for (auto& cached : g_prices) Py_DecRef(cached.first);
  g_prices.clear();
}
// Price the calling thread's Python calls from now on (it must hold the GIL).
void phantora_price_python_on_this_thread() {
  if (g_pricer != nullptr) PyEval_SetProfile(price_call, nullptr);
}
void phantora_stop_pricing_python_on_this_thread() { PyEval_SetProfile(nullptr, nullptr); }
}
