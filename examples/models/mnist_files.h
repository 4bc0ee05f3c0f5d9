// A synthetic MNIST: 60,000 training and 10,000 test images of 28x28 in the files and format of
// the real one (IDX, big-endian), so that programs read them with torch::data::datasets::MNIST
// as they would the real thing, without a download. Each class is a bar at its own place and
// angle under noise: learnable, not trivial.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace hotpath_examples {

namespace detail_mnist {
inline void put32(std::ofstream& f, std::uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24),
                              static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}

inline void write_set(const std::string& images, const std::string& labels, std::uint32_t n,
                      std::uint32_t seed) {
  std::mt19937 rng(seed);
  // Written under other names and renamed: programs started together never read half a file.
  const std::string tmp = ".tmp" + std::to_string(::getpid());
  std::ofstream fi(images + tmp, std::ios::binary), fl(labels + tmp, std::ios::binary);
  if (!fi || !fl) throw std::runtime_error("cannot write the synthetic MNIST files in " + images);
  put32(fi, 2051);
  put32(fi, n);
  put32(fi, 28);
  put32(fi, 28);
  put32(fl, 2049);
  put32(fl, n);
  std::vector<unsigned char> img(28 * 28);
  std::normal_distribution<float> noise(0.f, 30.f);
  for (std::uint32_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % 10);
    const int shift = static_cast<int>(rng() % 5) - 2;
    for (int y = 0; y < 28; ++y) {
      for (int x = 0; x < 28; ++x) {
        // Class c: a bar through the centre at angle c * 18 degrees, moved by a few pixels.
        const float a = 3.14159265f * static_cast<float>(c) / 10.f;
        const float d = std::abs((x - 14 - shift) * std::sin(a) - (y - 14) * std::cos(a));
        float v = (d < 2.5f ? 220.f : 10.f) + noise(rng);
        img[static_cast<std::size_t>(y * 28 + x)] = static_cast<unsigned char>(v < 0     ? 0
                                                                               : v > 255 ? 255
                                                                                         : v);
      }
    }
    fi.write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size()));
    const unsigned char label = static_cast<unsigned char>(c);
    fl.write(reinterpret_cast<const char*>(&label), 1);
  }
  fi.close();
  fl.close();
  if (!fi || !fl || std::rename((images + tmp).c_str(), images.c_str()) != 0 ||
      std::rename((labels + tmp).c_str(), labels.c_str()) != 0)
    throw std::runtime_error("cannot write the synthetic MNIST files " + images);
}
}  // namespace detail_mnist

// Writes the four files into `dir` (made if missing) unless they are there; returns `dir`.
inline std::string synthetic_mnist(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  const std::string train = dir + "/train-images-idx3-ubyte";
  if (!std::ifstream(train).good() || !std::ifstream(dir + "/t10k-labels-idx1-ubyte").good()) {
    detail_mnist::write_set(train, dir + "/train-labels-idx1-ubyte", 60000, 1);
    detail_mnist::write_set(dir + "/t10k-images-idx3-ubyte", dir + "/t10k-labels-idx1-ubyte", 10000,
                            2);
  }
  return dir;
}

}  // namespace hotpath_examples
