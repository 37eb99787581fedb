// cuda_graph_util.cpp: the CUDA runtime calls behind cuda_graph_util.hpp.
#include "tests/gpu/cuda_graph_util.hpp"

#include <cuda_runtime_api.h>

#include "models/cuda/check.hpp"

namespace bih::test {

TestStream::TestStream() { cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

TestStream::~TestStream() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

void TestStream::synchronize() const { cudaCheck(cudaStreamSynchronize(stream_)); }

void begin_capture(CUstream_st* stream) {
  cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

void abandon_capture(CUstream_st* stream) noexcept {
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
}

CapturedGraph::CapturedGraph(CUstream_st* stream) {
  cudaGraph_t graph = nullptr;
  cudaCheck(cudaStreamEndCapture(stream, &graph));
  const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  cudaCheck(instantiated);
}

CapturedGraph::~CapturedGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  cudaGetLastError();
}

void CapturedGraph::launch(CUstream_st* stream) { cudaCheck(cudaGraphLaunch(exec_, stream)); }

}  // namespace bih::test
