// registry.cpp: the registry of engine kinds (registry.hpp).
#include "engines/registry.hpp"

#include "base/errors.hpp"
#include "engines/command_engine.hpp"
#if BIH_HAVE_HTTP
#include "engines/http/http_engine.hpp"
#endif

namespace bih {

EngineRegistry::EngineRegistry() {
  add_kind(bih_engine_kind());
  add_kind(command_engine_kind());
#if BIH_HAVE_HTTP
  add_kind(http_engine_kind());
#else
  // Known, so a scenario gets the reason rather than "not available".
  add_kind({"http",
            [](const Scenario&) {
              return std::string(
                  "engine.kind 'http': this bih was built without HTTP support (cpp-httplib); "
                  "install Debian's libcpp-httplib-dev and pkg-config, and build again");
            },
            nullptr});
#endif
}

EngineRegistry& EngineRegistry::instance() {
  static EngineRegistry registry;
  return registry;
}

void EngineRegistry::add_kind(EngineKind kind) {
  for (EngineKind& k : kinds_) {
    if (k.name == kind.name) {
      k = std::move(kind);
      return;
    }
  }
  kinds_.push_back(std::move(kind));
}

const EngineKind* EngineRegistry::kind(const std::string& name) const {
  for (const EngineKind& k : kinds_) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::vector<std::string> EngineRegistry::kind_names() const {
  std::vector<std::string> names;
  for (const EngineKind& k : kinds_) names.push_back(k.name);
  return names;
}

void EngineRegistry::set_bih_cuda(BihCudaBackend backend) { cuda_ = std::move(backend); }

const BihCudaBackend* EngineRegistry::bih_cuda() const {
  return cuda_.make_engine ? &cuda_ : nullptr;
}

std::string EngineRegistry::unsupported_reason(const Scenario& s) const {
  const EngineKind* k = kind(s.engine.kind);
  if (k == nullptr) return "engine kind '" + s.engine.kind + "' is not available in this build";
  return k->unsupported_reason(s);
}

std::unique_ptr<TestedEngine> EngineRegistry::make(const Scenario& s,
                                                   const EngineContext& context) const {
  if (std::string why = unsupported_reason(s); !why.empty()) throw InfraError(why);
  return kind(s.engine.kind)->make(s, context);
}

}  // namespace bih
