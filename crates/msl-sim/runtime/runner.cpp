// runner.cpp -- runs one dispatch in its own process, for sanitizer builds
// (MSL_SIM_SANITIZE). The runner is linked with the sanitizer runtime
// (clang's static one: the shared ThreadSanitizer runtime cannot be
// preloaded into the Rust test process), dlopens the sanitizer-built kernel
// library and calls its msl_rt_dispatch. A sanitizer report ends the
// process with a non-zero status and the report on stderr, which
// src/dispatch.rs turns into an error.
//
// usage: runner REQUEST RESPONSE   (formats: see src/dispatch.rs, `oop`)
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

extern "C" {
struct MslDispatch {
  const void* entry;
  void* const* buffers;
  unsigned nbuffers;
  const unsigned long* tgmem_bytes;
  unsigned ntgmem;
  unsigned groups[3];
  unsigned threads[3];
  unsigned timeout_ms;
  unsigned coop;  // always 0 here: sanitizers need threaded lanes
};
typedef int (*DispatchFn)(const MslDispatch*, char*, unsigned long);
}

namespace {
struct Reader {
  std::vector<unsigned char> data;
  size_t pos = 0;
  template <class T> T get() {
    T v{};
    if (pos + sizeof(T) > data.size()) { std::fprintf(stderr, "runner: truncated request\n"); std::exit(3); }
    std::memcpy(&v, data.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    if (pos + n > data.size()) { std::fprintf(stderr, "runner: truncated request\n"); std::exit(3); }
    std::string s(reinterpret_cast<const char*>(data.data() + pos), n);
    pos += n;
    return s;
  }
};

std::vector<unsigned char> slurp(const char* path) {
  std::vector<unsigned char> out;
  FILE* f = std::fopen(path, "rb");
  if (!f) { std::perror(path); std::exit(3); }
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) { std::fprintf(stderr, "usage: runner REQUEST RESPONSE\n"); return 3; }
  Reader r{slurp(argv[1])};
  const std::string lib = r.str(), kernel = r.str();
  MslDispatch d{};
  for (auto& g : d.groups) g = r.get<uint32_t>();
  for (auto& t : d.threads) t = r.get<uint32_t>();
  d.timeout_ms = r.get<uint32_t>();
  std::vector<unsigned long> tg(r.get<uint32_t>());
  for (auto& t : tg) t = r.get<uint64_t>();
  const uint32_t nb = r.get<uint32_t>();
  std::vector<void*> bufs(nb, nullptr);
  std::vector<uint64_t> lens(nb, 0);
  std::vector<uint32_t> kinds(nb, 0);
  std::vector<std::pair<uint32_t, uint64_t>> views(nb);
  for (uint32_t i = 0; i < nb; ++i) {
    kinds[i] = r.get<uint32_t>();
    if (kinds[i] == 0) continue;
    if (kinds[i] == 3) {
      views[i].first = r.get<uint32_t>();
      views[i].second = r.get<uint64_t>();
      continue;
    }
    const std::string bytes = r.str();
    lens[i] = bytes.size();
    // exact length, so that the sanitizer's redzone starts at the end
    bufs[i] = std::malloc(bytes.empty() ? 1 : bytes.size());
    std::memcpy(bufs[i], bytes.data(), bytes.size());
  }
  const uint32_t nr = r.get<uint32_t>();
  std::vector<unsigned char*> regions(nr);
  std::vector<uint64_t> rlens(nr);
  for (uint32_t i = 0; i < nr; ++i) {
    const std::string bytes = r.str();
    rlens[i] = bytes.size();
    regions[i] = static_cast<unsigned char*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
    std::memcpy(regions[i], bytes.data(), bytes.size());
  }
  for (uint32_t i = 0; i < nb; ++i)
    if (kinds[i] == 3 && views[i].first < nr && views[i].second <= rlens[views[i].first])
      bufs[i] = regions[views[i].first] + views[i].second;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) { std::fprintf(stderr, "runner: %s\n", dlerror()); return 3; }
  d.entry = dlsym(h, ("msl_entry_" + kernel).c_str());
  auto run = reinterpret_cast<DispatchFn>(dlsym(h, "msl_rt_dispatch"));
  if (!d.entry || !run) { std::fprintf(stderr, "runner: kernel %s not in %s\n", kernel.c_str(), lib.c_str()); return 3; }
  d.buffers = bufs.data();
  d.nbuffers = nb;
  d.tgmem_bytes = tg.data();
  d.ntgmem = (unsigned)tg.size();
  std::vector<char> err(8192, 0);
  const int32_t code = run(&d, err.data(), err.size());
  FILE* f = std::fopen(argv[2], "wb");
  if (!f) { std::perror(argv[2]); return 3; }
  const uint64_t mlen = std::strlen(err.data());
  std::fwrite(&code, sizeof code, 1, f);
  std::fwrite(&mlen, sizeof mlen, 1, f);
  std::fwrite(err.data(), 1, mlen, f);
  for (uint32_t i = 0; i < nb; ++i)
    if (kinds[i] == 2) std::fwrite(bufs[i], 1, lens[i], f);
  for (uint32_t i = 0; i < nr; ++i) std::fwrite(regions[i], 1, rlens[i], f);
  std::fclose(f);
  std::fflush(stdout);
  std::_Exit(0);  // lanes a watchdog could not stop may still run
}
