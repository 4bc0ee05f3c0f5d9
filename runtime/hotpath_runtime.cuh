// Everything a generated kernel includes.
#pragma once

#include "types.cuh"
#include "vector.cuh"
#include "pointwise.cuh"
#include "reduce.cuh"
