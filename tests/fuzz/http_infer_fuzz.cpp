// libFuzzer target: arbitrary bytes through the HTTP frontend's request parsing. The same input is
// fed (1) as a pipelined byte stream to the frontend's RequestParser with kiln-serve's default
// limits (64 KiB header, 64 MiB body, the read buffer's cap, a request memory budget), each
// complete request routed through route_api on a server core with an empty repository, so
// chunked bodies, trailers and pipelining reach the same code a socket would; and (2) to the KServe
// v2 infer-request decoder, with an Inference-Header-Content-Length taken from the first two bytes;
// a decoded request is then encoded back as a response (JSON and binary) so the encoder sees
// every tensor type the decoder can produce. The shared memory routes register, list and
// unregister regions of one small object the target makes (/kiln-fuzz-http-shm, 64 KiB), under
// small limits, so the fuzzer reaches their success paths; CUDA regions open on a fake device
// (64 KiB of host memory behind any 64-byte handle) for the same reason. Any crash, leak or
// sanitizer report is a bug; a kiln::Error is the expected outcome for bad input.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "server/http/infer_codec.hpp"
#include "server/http/request_parser.hpp"
#include "server/http/routes.hpp"
#include "server/server.hpp"

namespace {

kiln::server::InferenceServer* core = nullptr;
const kiln::server::http::HttpOptions options;  // kiln-serve's defaults

// The fake GPU of CUDA regions: every handle opens the same 64 KiB (a byte size past them is
// refused, as the GPU backend refuses one past the exported allocation).
struct FakeDeviceMemory final : kiln::server::DeviceSharedMemory {
  static std::vector<std::byte>& bytes() {
    static std::vector<std::byte> b(65536);
    return b;
  }
  void copy_to_host(uint64_t offset, std::span<std::byte> to) override {
    std::memcpy(to.data(), bytes().data() + offset, to.size());
  }
  void copy_from_host(uint64_t offset, std::span<const std::byte> from) override {
    std::memcpy(bytes().data() + offset, from.data(), from.size());
  }
};

std::unique_ptr<kiln::server::DeviceSharedMemory> open_fake_device(std::span<const std::byte>,
                                                                   int64_t device_id,
                                                                   uint64_t byte_size) {
  KILN_CHECK_ARG(device_id == 0, "no GPU {}", device_id);
  KILN_CHECK_ARG(byte_size <= FakeDeviceMemory::bytes().size(), "byte_size {} is too large",
                 byte_size);
  return std::make_unique<FakeDeviceMemory>();
}

// Parses `bytes` as a connection would: requests one after another until the bytes run out or
// one is malformed; each complete request is routed.
void serve_stream(std::string_view bytes) {
  namespace http = boost::beast::http;
  // The read buffer's cap in http_server.cpp: a header (or trailer) must fit it.
  const size_t buffer_limit = options.max_header_bytes + (size_t{16} << 10);
  while (!bytes.empty()) {
    kiln::server::http::RequestParser parser(&core->request_memory(), options.max_body_bytes,
                                             static_cast<std::uint32_t>(options.max_header_bytes));
    parser.eager(true);
    boost::beast::error_code ec;
    while (!bytes.empty() && !parser.is_done()) {
      const size_t window =
          parser.is_header_done() ? bytes.size() : std::min(bytes.size(), buffer_limit);
      const size_t used = parser.put(boost::asio::buffer(bytes.data(), window), ec);
      if (ec == http::error::need_more && window == buffer_limit) return;  // buffer_overflow
      if (ec && ec != http::error::need_more) return;
      if (used == 0) return;
      bytes.remove_prefix(used);
    }
    if (!parser.is_done()) return;
    kiln::server::MemoryLease lease;
    kiln::server::http::Request request = parser.release(lease);
    kiln::server::http::route_api(*core, options, request, [](kiln::server::http::Response) {});
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::Tensor::set_max_bytes(size_t{64} << 20);
  kiln::server::ServerOptions o;
  const auto dir = std::filesystem::temp_directory_path() / "kiln-fuzz-http-repo";
  std::filesystem::create_directories(dir);
  o.repository.paths = {dir.string()};
  o.repository.mode = kiln::server::ModelControlMode::Explicit;
  o.request_memory_bytes = size_t{256} << 20;
  // Few regions and bytes: what the fuzzer registers stays mapped across its inputs.
  o.shared_memory.max_regions = 8;
  o.shared_memory.max_mapped_bytes = size_t{1} << 20;
  o.shared_memory_device = open_fake_device;
  const int fd = shm_open("/kiln-fuzz-http-shm", O_RDWR | O_CREAT, 0600);
  if (fd >= 0) {
    (void)ftruncate(fd, 65536);
    close(fd);
  }
  // A trace file, so that trace setting updates that turn tracing on are accepted and reach the
  // sampling code (the repository is empty: no request is ever traced into it).
  o.trace.file = (dir / "trace.json").string();
  core = new kiln::server::InferenceServer(o);
  core->start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  serve_stream(bytes);
  std::optional<size_t> header_length;
  std::string_view body = bytes;
  if (size >= 2 && (data[0] & 1)) {
    header_length = (size_t{data[0]} | size_t{data[1]} << 8) % (size - 1);
    body = bytes.substr(2);
    if (*header_length > body.size()) header_length = body.size();
  }
  try {
    std::unique_ptr<kiln::server::InferRequest> request =
        kiln::server::http::decode_infer_request(body, header_length);
    kiln::server::InferResponse response;
    response.model_name = "fuzz";
    response.id = request->id;
    for (kiln::server::InferInput& in : request->inputs) {
      kiln::server::InferOutput out;
      out.name = in.name;
      out.datatype = in.datatype;
      out.shape = in.shape;
      out.data = in.data;
      out.in_shared_memory = in.shm.has_value();  // the server would have written it there
      response.outputs.push_back(std::move(out));
    }
    kiln::server::http::OutputEncoding json;
    (void)kiln::server::http::encode_infer_response(response, json);
    kiln::server::http::OutputEncoding binary;
    binary.binary_default = true;
    (void)kiln::server::http::encode_infer_response(response, binary);
  } catch (const kiln::Error&) {
  }
  return 0;
}
