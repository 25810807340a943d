// Package versionserver is the version server of the auto-update example:
// a gRPC VersionService whose releases are published at run time, through
// Publish or the VersionAdmin service.
package versionserver

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
)

// Server serves VersionService and VersionAdmin on a loopback address.
type Server struct {
	mu       sync.Mutex
	releases map[string]*versionpb.Package // by channel
	down     bool
	asked    int

	grpc *grpc.Server
	addr string
}

// Start serves a server with no releases on addr ("127.0.0.1:0" picks a
// port).
func Start(addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("version server: %w", err)
	}
	s := &Server{releases: map[string]*versionpb.Package{}, grpc: grpc.NewServer(), addr: l.Addr().String()}
	versionpb.RegisterVersionServiceServer(s.grpc, versionService{s: s})
	versionpb.RegisterVersionAdminServer(s.grpc, versionAdmin{s: s})
	go func() { _ = s.grpc.Serve(l) }()
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.addr }

// Stop stops serving.
func (s *Server) Stop() { s.grpc.Stop() }

// Publish makes pkg the release of channel.
func (s *Server) Publish(channel string, pkg *versionpb.Package) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases[channel] = proto.Clone(pkg).(*versionpb.Package)
}

// SetAvailable makes the server answer GetVersion with Unavailable while
// available is false, as a server being deployed would.
func (s *Server) SetAvailable(available bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = !available
}

// Asked counts the GetVersion calls served.
func (s *Server) Asked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

type versionService struct {
	versionpb.UnimplementedVersionServiceServer
	s *Server
}

func (v versionService) GetVersion(_ context.Context, req *versionpb.GetVersionRequest) (*versionpb.GetVersionResponse, error) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	if s.down {
		return nil, status.Error(codes.Unavailable, "the version server is down for maintenance")
	}
	pkg, ok := s.releases[req.GetChannel()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no release on channel %q", req.GetChannel())
	}
	return &versionpb.GetVersionResponse{Package: proto.Clone(pkg).(*versionpb.Package)}, nil
}

type versionAdmin struct {
	versionpb.UnimplementedVersionAdminServer
	s *Server
}

func (a versionAdmin) Publish(_ context.Context, req *versionpb.PublishRequest) (*versionpb.PublishResponse, error) {
	if req.GetChannel() == "" || req.GetPackage().GetVersion() == "" {
		return nil, status.Error(codes.InvalidArgument, "a release needs a channel and a package with a version")
	}
	a.s.Publish(req.GetChannel(), req.GetPackage())
	return &versionpb.PublishResponse{}, nil
}
