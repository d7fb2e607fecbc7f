// __half of the CPU emulation (see ../cuda_on_cpu_half.h).
#include "../cuda_on_cpu_half.h"
