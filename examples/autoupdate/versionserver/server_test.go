package versionserver_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
	"github.com/kfsm/kfsm/examples/autoupdate/versionserver"
)

// The release changes at run time through the admin RPC, and clients see
// it over gRPC.
func TestPublishOverGRPCChangesTheRelease(t *testing.T) {
	s, err := versionserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	admin, versions := versionpb.NewVersionAdminClient(conn), versionpb.NewVersionServiceClient(conn)
	ask := &versionpb.GetVersionRequest{Client: "agent", Channel: "stable"}

	if _, err := versions.GetVersion(t.Context(), ask); status.Code(err) != codes.NotFound {
		t.Errorf("GetVersion before any release = %v, want NotFound", err)
	}
	for _, version := range []string{"1.0.0", "1.1.0"} {
		pkg := &versionpb.Package{Name: "agent", Version: version, Runtime: &versionpb.Runtime{StartupMillis: 10}}
		if _, err := admin.Publish(t.Context(), &versionpb.PublishRequest{Channel: "stable", Package: pkg}); err != nil {
			t.Fatal(err)
		}
		resp, err := versions.GetVersion(t.Context(), ask)
		if err != nil || resp.GetPackage().GetVersion() != version {
			t.Fatalf("GetVersion = %v, %v; want %s", resp, err, version)
		}
	}
	if _, err := admin.Publish(t.Context(), &versionpb.PublishRequest{Channel: "stable"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Publish without a package = %v, want InvalidArgument", err)
	}

	s.SetAvailable(false)
	if _, err := versions.GetVersion(t.Context(), ask); status.Code(err) != codes.Unavailable {
		t.Errorf("GetVersion while down = %v, want Unavailable", err)
	}
	if s.Asked() != 4 {
		t.Errorf("Asked() = %d, want 4", s.Asked())
	}
}
