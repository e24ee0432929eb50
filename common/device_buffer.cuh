// RAII device memory: freed when it goes out of scope, move-only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda_check.cuh"

namespace pa {

template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) { allocate(count); }
    explicit DeviceBuffer(const std::vector<T>& host) { allocate(host.size()); upload(host); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }

    void allocate(size_t count) {
        release();
        if (count > 0) CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T)));
        count_ = count;
    }
    void upload(const std::vector<T>& host) {
        if (host.size() != count_) allocate(host.size());
        if (count_) CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> host(count_);
        if (count_) CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
        return host;
    }
    void copy_from(const DeviceBuffer& other) {
        if (other.count_ != count_) allocate(other.count_);
        if (count_) CUDA_CHECK(cudaMemcpy(ptr_, other.ptr_, bytes(), cudaMemcpyDeviceToDevice));
    }
    // Fills every byte with `byte`; 0xff makes fp16 / bf16 / fp32 elements NaN (the poison).
    void fill_bytes(int byte) {
        if (count_) CUDA_CHECK(cudaMemset(ptr_, byte, bytes()));
    }

    T* get() { return ptr_; }
    const T* get() const { return ptr_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

  private:
    void release() {
        if (ptr_) cudaFree(ptr_);  // no check: never throw from a destructor
        ptr_ = nullptr;
        count_ = 0;
    }
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

// `copies` device copies of `host` (at least one): what an L2-cold timing rotates through, so
// that each launch finds its data out of L2.
template <class T>
std::vector<DeviceBuffer<T>> device_copies(const std::vector<T>& host, int copies) {
    std::vector<DeviceBuffer<T>> out;
    out.emplace_back(host);
    for (int c = 1; c < copies; ++c) {
        out.emplace_back(out[0].size());
        out.back().copy_from(out[0]);
    }
    return out;
}

}  // namespace pa
