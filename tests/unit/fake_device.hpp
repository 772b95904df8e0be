#pragma once
// A fake device for tests: host memory behind the device interface, so placement, planned
// copies, constant uploads and arenas are tested without a GPU. Every allocation is tracked and
// every copy counted; its kernels (fake_device.cpp, registered in the kernel table under backend
// "fake-device": Relu, Mul, Add) check that each pointer they get is their device's memory, never
// the host's. Relu declares in place over input 0; Mul and Add declare nothing, so the memory
// planner must never give their output an input's space. Mul's check asks the device
// (has_multiplier), as a GPU kernel asks the device's arch.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::testing {

class FakeDevice final : public backends::Backend {
 public:
  static constexpr const char* kName = "fake-device";
  std::string_view name() const override { return kName; }
  backends::DeviceKind device_kind() const override { return backends::DeviceKind::Gpu; }
  backends::DeviceBuffer allocate(size_t bytes) override {
    void* p = std::malloc(std::max<size_t>(bytes, 1));
    live_[p] = std::max<size_t>(bytes, 1);
    ++allocations;
    return backends::DeviceBuffer(p, bytes, [this](void* q) {
      live_.erase(q);
      std::free(q);
    });
  }
  // Streams run work at once, or record it between begin_capture and end_capture (as a GPU
  // stream records a graph); replaying runs the recorded functions again.
  std::unique_ptr<backends::Stream> create_stream() override {
    struct Recorded final : backends::CapturedWork {
      FakeDevice* dev;
      std::vector<std::function<void()>> work;
      void replay(backends::Stream&) override {
        ++dev->replays;
        for (auto& fn : work) fn();
      }
    };
    struct S final : backends::Stream {
      FakeDevice* dev;
      std::unique_ptr<Recorded> recording;
      explicit S(FakeDevice* d) : dev(d) {}
      void enqueue(std::function<void()> fn) override {
        if (recording) {
          recording->work.push_back(std::move(fn));
        } else {
          fn();
        }
      }
      void wait(const backends::Event&) override {}
      void synchronize() override {}
      bool can_capture() const override { return dev->can_capture; }
      void begin_capture() override {
        recording = std::make_unique<Recorded>();
        recording->dev = dev;
      }
      std::unique_ptr<backends::CapturedWork> end_capture() override {
        ++dev->captures;
        return std::move(recording);
      }
    };
    return std::make_unique<S>(this);
  }
  std::unique_ptr<backends::Event> create_event() override {
    struct E final : backends::Event {
      std::chrono::steady_clock::time_point at;
      void record(backends::Stream&) override { at = std::chrono::steady_clock::now(); }
      void synchronize() override {}
      double elapsed_ms(const backends::Event& start) const override {
        return std::chrono::duration<double, std::milli>(at - static_cast<const E&>(start).at)
            .count();
      }
    };
    ++events;
    return std::make_unique<E>();
  }
  void copy_to_device(void* dst, const void* src, size_t n, backends::Stream&) override {
    if (!owns(dst) || owns(src)) throw std::runtime_error("copy_to_device: not host -> device");
    ++to_device;
    std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, size_t n, backends::Stream&) override {
    if (owns(dst) || !owns(src)) throw std::runtime_error("copy_to_host: not device -> host");
    ++to_host;
    std::memcpy(dst, src, n);
  }
  backends::Support supports(const ir::Node& n) const override {
    if (!only_ops.empty() && !only_ops.count(n.op_type())) {
      std::string list;
      for (const std::string& op : only_ops) list += (list.empty() ? "" : ", ") + op;
      return backends::Support::no("the fake device runs " + list + " only");
    }
    return backends::KernelTable::instance().select(*this, n);
  }
  std::unique_ptr<backends::Kernel> create_kernel(const ir::Node& n,
                                                  std::string_view kernel) override {
    return backends::KernelTable::instance().create(*this, n, kernel);
  }
  void set_kernel_preference(backends::KernelPreference p) override { preference = p; }
  std::vector<std::string> library_versions() const override { return libraries; }
  backends::KernelPreference kernel_preference() const override { return preference; }

  // A pointer inside one of this device's allocations.
  bool owns(const void* p) const {
    for (const auto& [a, size] : live_) {
      if (p >= a && static_cast<const char*>(p) < static_cast<char*>(a) + size) return true;
    }
    return false;
  }
  int to_device = 0, to_host = 0, allocations = 0, events = 0;
  // Recording for replay: whether streams offer it, recordings made, replays run, and kernel
  // runs (a replay runs the recorded work without calling the kernels).
  bool can_capture = false;
  int captures = 0, replays = 0, kernel_runs = 0;
  // What this "arch" can do: kernels' checks receive the backend and ask (fake.mul needs it).
  bool has_multiplier = true;
  // When not empty: the only ops this device takes (others fall back to the CPU).
  std::set<std::string> only_ops;
  // What its supports() prefers among several kernels (KernelDef::library).
  backends::KernelPreference preference = backends::KernelPreference::Default;
  // Tactics: its kernels "time" a choice at the first run of a shape they have no tactic for
  // (counted in `timings`), report "<kernel>@<dims>" as their tactics, and log what an engine
  // gave them (use_tactics) in `tactics_given`. `libraries` is what they depend on.
  std::vector<std::string> libraries = {"fakelib 1.0"};
  int timings = 0;
  std::vector<std::string> tactics_given;

 private:
  std::map<void*, size_t> live_;
};

}  // namespace kiln::testing
