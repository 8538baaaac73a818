// GPU memory for compiled programs run without torch (the Python bridge
// allocates through torch's caching allocator instead): allocations and a
// call's workspace through the CUDA driver. No Python.
// Depends on runtime/Device.h, backend/cuda/CudaDriver.h.
#pragma once

#include "runtime/Device.h"

namespace kiln::runtime {

class CudaDevice : public Device {
public:
  /// The device of CUDA ordinal `ordinal` (one object per ordinal).
  /// Throws kiln::Error where there is no driver or no such GPU.
  static CudaDevice &get(int ordinal);
  std::string name() const override;
  char *allocate(int64_t bytes) override;
  void deallocate(char *memory) override;
  Workspace workspace(int64_t bytes) override;
  int ordinal() const { return ordinal_; }

protected:
  void releaseWorkspace(char *data, void *token) override;

private:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  int ordinal_;
};

} // namespace kiln::runtime
