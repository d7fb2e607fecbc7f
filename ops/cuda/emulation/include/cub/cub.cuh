// CUB's device-wide calls of the CPU emulation (see ../../cuda_on_cpu_cub.h).
#include "../../cuda_on_cpu_cub.h"
