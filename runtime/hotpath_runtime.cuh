// Everything a generated kernel includes.
#pragma once

#include "pointwise.cuh"
#include "reduce.cuh"
#include "types.cuh"
#include "vector.cuh"
