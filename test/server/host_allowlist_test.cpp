#include "executor/server/host_allowlist.hpp"

#include <gtest/gtest.h>

namespace telos::exec {
namespace {

TEST(HostAllowlist, LocalhostAndIpLiteralsAlways) {
  const HostAllowlist hosts({});
  for (const char* host :
       {"localhost", "localhost:8000", "LocalHost", "localhost.", "127.0.0.1", "127.0.0.1:8000",
        "10.0.0.7:80", "[::1]", "[::1]:8000", "[fe80::1]:1", "[::ffff:127.0.0.1]:9"})
    EXPECT_TRUE(hosts.allows(host)) << host;
}

TEST(HostAllowlist, OtherNamesAndMalformedValuesAreRefused) {
  const HostAllowlist hosts({});
  for (const char* host :
       {"evil.example", "evil.example:8000", "localhost.evil.example", "127.0.0.1.nip.io",
        "sub.localhost", "", ":8000", "localhost:", "localhost:80x", "localhost:123456", "[::1",
        "[::1]x", "[::1]:", "[evil]", "::1", "127.1", "0x7f.0.0.1", "999.0.0.1"})
    EXPECT_FALSE(hosts.allows(host)) << host;
}

TEST(HostAllowlist, OperatorNames) {
  const HostAllowlist hosts({"API.example.test.", "other"});
  EXPECT_TRUE(hosts.allows("api.example.test"));
  EXPECT_TRUE(hosts.allows("Api.Example.Test:443"));
  EXPECT_TRUE(hosts.allows("other."));
  EXPECT_FALSE(hosts.allows("example.test"));
  const HostAllowlist any({"*"});
  EXPECT_TRUE(any.allows("anything.at.all:1"));
  EXPECT_TRUE(any.allows("not even [a host"));
}

}  // namespace
}  // namespace telos::exec
