// cuda_graph_util.hpp: capture a stream's work into a CUDA graph and replay it, for GPU tests
// that include no CUDA header (defined in cuda_graph_util.cpp).
#pragma once

struct CUstream_st;
struct CUgraphExec_st;

namespace bih::test {

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
