// A CoreDNS with only the plugins the real test node needs (Kubernetes names of Services and Pods, health,
// cache), so that building it pulls in none of the cloud providers' SDKs that a full CoreDNS links.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order in which a query passes the plugins; it follows CoreDNS's own plugin.cfg.
func init() {
	dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"}
}

func main() { coremain.Run() }
