// cuda_graph_util.hpp: a stream of the test's own, and capture of its work into a CUDA graph to
// replay, for GPU tests that include no CUDA header (defined in cuda_graph_util.cpp).
#pragma once

struct CUstream_st;
struct CUgraphExec_st;

namespace bih::test {

// A non-blocking CUDA stream of the test's own: the legacy default stream cannot be captured.
class TestStream {
 public:
  TestStream();
  ~TestStream();  // waits for the stream's work first
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;

  CUstream_st* get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream_st* stream_ = nullptr;
};

// cudaStreamBeginCapture in thread-local mode, so that several rank threads of one process can
// capture at once without prohibiting each other's CUDA calls.
void begin_capture(CUstream_st* stream);

// Ends a capture and throws away what it recorded; for the path where capturing failed. Never
// throws.
void abandon_capture(CUstream_st* stream) noexcept;

// The graph a capture recorded, instantiated.
class CapturedGraph {
 public:
  // Ends the capture on `stream` and instantiates it; std::runtime_error if capture failed.
  explicit CapturedGraph(CUstream_st* stream);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Enqueues one replay on `stream`.
  void launch(CUstream_st* stream);

 private:
  CUgraphExec_st* exec_ = nullptr;
};

}  // namespace bih::test
