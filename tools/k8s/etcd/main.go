// Command etcd is etcd's own server entry point, built here so that the
// embedded cluster runs a real etcd of the version Kubernetes pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
