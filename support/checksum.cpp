#include "support/checksum.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>

#include "support/mapped_file.hpp"
#include "support/threads.hpp"

namespace telos {
namespace {

constexpr std::uint64_t P1 = 0x9E3779B185EBCA87ull;
constexpr std::uint64_t P2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t P3 = 0x165667B19E3779F9ull;
constexpr std::uint64_t P4 = 0x85EBCA77C2B2AE63ull;
constexpr std::uint64_t P5 = 0x27D4EB2F165667C5ull;

inline std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline std::uint64_t read64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t read32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint64_t round(std::uint64_t acc, std::uint64_t input) {
  acc += input * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}
inline std::uint64_t merge(std::uint64_t acc, std::uint64_t val) {
  acc ^= round(0, val);
  return acc * P1 + P4;
}

}  // namespace

Xxh64::Xxh64(std::uint64_t seed) : seed_(seed) {
  v_[0] = seed + P1 + P2;
  v_[1] = seed + P2;
  v_[2] = seed;
  v_[3] = seed - P1;
}

void Xxh64::update(const void* data, std::size_t length) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  total_ += length;
  if (buf_len_ + length < 32) {
    std::memcpy(buf_ + buf_len_, p, length);
    buf_len_ += length;
    return;
  }
  if (buf_len_ > 0) {
    const std::size_t fill = 32 - buf_len_;
    std::memcpy(buf_ + buf_len_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], read64(buf_ + 8 * i));
    p += fill;
    length -= fill;
    buf_len_ = 0;
  }
  while (length >= 32) {
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], read64(p + 8 * i));
    p += 32;
    length -= 32;
  }
  std::memcpy(buf_, p, length);
  buf_len_ = length;
}

std::uint64_t Xxh64::digest() const {
  std::uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge(h, v_[i]);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  const std::uint8_t* p = buf_;
  std::size_t n = buf_len_;
  while (n >= 8) {
    h ^= round(0, read64(p));
    h = rotl(h, 27) * P1 + P4;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    h ^= static_cast<std::uint64_t>(read32(p)) * P1;
    h = rotl(h, 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    h ^= (*p) * P5;
    h = rotl(h, 11) * P1;
    ++p;
    --n;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

std::uint64_t xxh64(const void* data, std::size_t length, std::uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, length);
  return h.digest();
}

std::uint64_t xxh64_range(const MappedFile& file, std::size_t offset, std::size_t length) {
  constexpr std::size_t kWindow = std::size_t{16} << 20;
  Xxh64 h;
  for (std::size_t at = offset; at < offset + length; at += kWindow) {
    const std::size_t n = std::min(kWindow, offset + length - at);
    h.update(file.data() + at, n);
    file.release(at, n);
  }
  return h.digest();
}

void xxh64_ranges(std::vector<ChecksumRange>& ranges) {
  constexpr unsigned kThreads = 8;
  std::vector<std::size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return ranges[x].length > ranges[y].length;
  });
  std::atomic<std::size_t> next{0};
  run_on_threads(std::min<std::size_t>(kThreads, ranges.size()), [&] {
    for (std::size_t i = next++; i < order.size(); i = next++) {
      ChecksumRange& r = ranges[order[i]];
      r.digest = xxh64_range(*r.file, r.offset, r.length);
    }
  });
}

std::string checksum_string(std::uint64_t digest) {
  static const char* hex = "0123456789abcdef";
  std::string s = "xxh64:";
  for (int i = 60; i >= 0; i -= 4) s.push_back(hex[(digest >> i) & 0xf]);
  return s;
}

}  // namespace telos
