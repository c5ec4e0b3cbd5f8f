// Tensor: a dense, row-major (C order) array with a dtype and a static shape. Storage is shared
// between copies (constants are referenced by the graph and by the executor without copying);
// mutate only tensors you created.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "support/error.h"

namespace kiln {

using Shape = std::vector<int64_t>;

// Number of elements; throws UserError on negative dims or overflow (sizes come from untrusted models).
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[1,3,224,224]"
// Row-major strides (in elements) of a shape.
std::vector<int64_t> shape_strides(const Shape& s);

struct TensorType {
  DType dtype = DType::Undefined;
  Shape shape;
  bool operator==(const TensorType&) const = default;
  std::string str() const;  // "f32[1,3,224,224]"
};

class Tensor {
 public:
  Tensor() = default;  // undefined: stands for an omitted optional input
  Tensor(DType dtype, Shape shape);  // zero-filled

  template <class T>
  static Tensor from_vector(const std::vector<T>& v, Shape shape) {
    Tensor t(dtype_of<T>(), std::move(shape));
    KILN_CHECK(int64_t(v.size()) == t.numel(), "from_vector size mismatch");
    T* d = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) d[i] = v[i];
    return t;
  }
  template <class T>
  static Tensor scalar(T v) {
    return from_vector<T>({v}, {});
  }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return int64_t(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(size_t(i)); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }

  template <class T>
  T* data() {
    KILN_CHECK(dtype_of<T>() == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(dtype_of<T>()));
    return reinterpret_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    KILN_CHECK(dtype_of<T>() == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(dtype_of<T>()));
    return reinterpret_cast<const T*>(raw());
  }
  void* raw() { return storage_ ? storage_->data() + offset_ : nullptr; }
  const void* raw() const { return storage_ ? storage_->data() + offset_ : nullptr; }

  // Same storage, new shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
  // Deep copy.
  Tensor clone() const;
  // Element i converted to double / int64 (any dtype); for shape inputs, scalars and tests.
  double as_double(int64_t i) const;
  int64_t as_int64(int64_t i) const;
  // All elements of an integer tensor as int64 (shape inputs such as Reshape's `shape`).
  std::vector<int64_t> to_int64_vector() const;
  // Converts to another dtype with C++ conversion semantics (float→int truncates, →bool is != 0).
  Tensor cast(DType to) const;
  // Exact equality of dtype, shape and bytes.
  bool bitwise_equal(const Tensor& o) const;

 private:
  DType dtype_ = DType::Undefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<std::vector<uint8_t>> storage_;
  size_t offset_ = 0;
};

}  // namespace kiln
