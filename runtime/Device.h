// Where a compiled program's buffers live: memory for outputs and for the
// temporaries of a call (the workspace). The CPU device now; a CUDA device
// will sit beside it. No Python. Depends on nothing in kiln.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime {

class Device;

/// Memory for one call's temporaries, held until this object goes.
class Workspace {
public:
  Workspace() = default;
  Workspace(Device *device, char *data, void *token)
      : device_(device), data_(data), token_(token) {}
  Workspace(const Workspace &) = delete;
  Workspace &operator=(const Workspace &) = delete;
  Workspace(Workspace &&other) noexcept;
  ~Workspace();
  char *data() const { return data_; }

private:
  Device *device_ = nullptr;
  char *data_ = nullptr;
  void *token_ = nullptr;
};

class Device {
public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  /// `bytes` of memory aligned to 64 bytes (a valid address for 0 bytes);
  /// throws kiln::Error when there is none.
  virtual char *allocate(int64_t bytes) = 0;
  virtual void deallocate(char *memory) = 0;
  /// `bytes` of 64-byte aligned memory for one call's temporaries.
  virtual Workspace workspace(int64_t bytes) = 0;

protected:
  friend class Workspace;
  virtual void releaseWorkspace(char *data, void *token) = 0;
};

/// Host memory. A call's workspace is the calling thread's, reused from call
/// to call; a nested call on the same thread (a torch op calling back into a
/// compiled function) gets memory of its own.
class CpuDevice : public Device {
public:
  static CpuDevice &get();
  std::string name() const override { return "cpu"; }
  char *allocate(int64_t bytes) override;
  void deallocate(char *memory) override;
  Workspace workspace(int64_t bytes) override;

protected:
  void releaseWorkspace(char *data, void *token) override;
};

} // namespace kiln::runtime
