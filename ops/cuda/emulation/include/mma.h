// nvcuda::wmma of the CPU emulation (see ../cuda_on_cpu_wmma.h).
#include "../cuda_on_cpu_wmma.h"
