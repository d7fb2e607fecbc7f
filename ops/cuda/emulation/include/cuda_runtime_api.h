// The CUDA runtime API of the CPU emulation (see ../cuda_on_cpu.h).
#include "../cuda_on_cpu.h"
