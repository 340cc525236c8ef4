// lib/python/small_vector.hpp: SmallVector<T, N>, a vector whose first N elements live inside the object (no heap
// allocation), for the per-call arrays of a push (one entry per field: push_call.cpp) and a reserved step's field
// pointers (objects.hpp). A schema of more than N fields spills onto the heap, as a std::vector.
//
// Why not boost::container::small_vector: the Python package declares no Boost (README, pyproject.toml and the
// package's CMake list what a build needs), and tools/build_wheel.sh builds the wheel with /usr/include/boost hidden
// to prove it. The calls need only resize, [], data and size, which this covers in a few lines.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace shmreplay::python {

/// A resizable array of T, held in place up to N elements and on the heap beyond. Elements are value-initialised
/// by resize (T() : a null py::object, a zero pointer). Not copyable (its users keep one per call or per object).
/// Not thread-safe: one owner at a time.
template <class T, std::size_t N>
class SmallVector {
 public:
  SmallVector() noexcept = default;
  SmallVector(const SmallVector&) = delete;
  SmallVector& operator=(const SmallVector&) = delete;
  ~SmallVector() { resize(0); }

  /// n elements: the first min(size(), n) kept, new ones T(). Allocates only when n > N (and from then on keeps
  /// its elements on the heap).
  void resize(std::size_t n) {
    if (heap_.empty() && n <= N) {
      for (std::size_t i = size_; i < n; ++i) new (in_place(i)) T();
      for (std::size_t i = n; i < size_; ++i) in_place(i)->~T();
      size_ = n;
      return;
    }
    if (heap_.empty()) {  // spill: move the elements held in place onto the heap
      heap_.reserve(n);
      for (std::size_t i = 0; i < size_; ++i) {
        heap_.push_back(std::move(*in_place(i)));
        in_place(i)->~T();
      }
    }
    heap_.resize(n);
    size_ = n;
  }

  std::size_t size() const noexcept { return size_; }
  T* data() noexcept { return heap_.empty() ? in_place(0) : heap_.data(); }
  const T* data() const noexcept { return heap_.empty() ? in_place(0) : heap_.data(); }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }

 private:
  T* in_place(std::size_t i) noexcept { return reinterpret_cast<T*>(storage_) + i; }
  const T* in_place(std::size_t i) const noexcept { return reinterpret_cast<const T*>(storage_) + i; }

  alignas(T) std::byte storage_[N * sizeof(T)];  // elements [0, size_) constructed while heap_ is empty
  std::vector<T> heap_;                          // the elements, once more than N were asked for
  std::size_t size_ = 0;
};

}  // namespace shmreplay::python
