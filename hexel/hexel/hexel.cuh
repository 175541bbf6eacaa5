// Everything Hexel offers to device code, for kernels (and NVRTC programs) that want one include.
// Including the Blackwell headers costs nothing on sm_90a: their inline functions emit PTX only
// when a kernel calls them.
#pragma once
#include "hexel/cluster.cuh"
#include "hexel/cluster_launch_control.cuh"
#include "hexel/config.cuh"
#include "hexel/cp_async.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/math.cuh"
#include "hexel/matrix_ldst.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/memory_order.cuh"
#include "hexel/mma.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/sync.cuh"
#include "hexel/tcgen05.cuh"
#include "hexel/tcgen05_accum.cuh"
#include "hexel/tcgen05_desc.cuh"
#include "hexel/tensor_map.cuh"
#include "hexel/timer.cuh"
#include "hexel/tma.cuh"
#include "hexel/wgmma.cuh"
#include "hexel/wgmma_desc.cuh"
