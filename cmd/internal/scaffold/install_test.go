//go:build e2e

package scaffold

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"debug/elf"
	"debug/gosym"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/cluster"
)

var installProject = flag.String("project", "", "the project that TestInstall installs, which kfsm init wrote and completed; empty: one that the test writes")

// TestInstall installs a project as a team ships it and runs its operator
// as the Deployment's pod would run, on an embedded Kubernetes with the
// controllers, the scheduler and a kwok node: make image and make
// build-installer, pinned to VERSION; dist/install.yaml applied with
// server-side apply; the pod scheduled; the operator, taken out of the
// image, started as a process of this machine with the container's
// arguments and environment, as the pod's ServiceAccount.
//
// What differs from a cluster: kwok's node runs no container, so what a
// node would do, the test does. The kubelet's part (the Secret volume, the
// ServiceAccount token, the downward API) is startPod's, and kube-proxy's
// (a Service's name leads to the pod) is services', a CONNECT proxy that
// the API server reaches the webhook Service through (HTTPS_PROXY), since
// the embedded API server has no Service network: the webhook
// configurations keep their Service, and the API server checks the
// operator's certificate for the Service's name as in a cluster. The
// operator is the image's binary, with the Deployment's arguments and
// environment as dist/install.yaml has them, except that
// --webhook-cert-dir names the test's copy of the Secret volume in place
// of its mount path; it listens on this machine's ports, and does not run
// as user 65532, nor with the container's file system or limits.
//
// Before the operator serves, writes of the kind go through, unchecked:
// the webhook configurations are fail-open. The operator makes its
// certificate into its Secret, injects its CA and arms the
// configurations; then its webhooks refuse what kfsm refuses, it drives
// the sample to Ready, and it serves its metrics to the metrics reader
// alone. The install applied again, forced, disarms the configurations
// until the operator arms them again. Once it has stopped, writes of the
// kind are refused.
func TestInstall(t *testing.T) {
	dir := *installProject
	if dir == "" {
		dir = project(t)
	}
	src, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := parseRecord(src)
	if err != nil {
		t.Fatal(err)
	}
	k := newKind(rec.Module, rec.Kinds[0].Kind, rec.Kinds[0].Version)
	namespace := rec.Name + "-system"

	run(t, dir, "make", "image")
	run(t, dir, "make", "build-installer")
	img := readImage(t, filepath.Join(dir, "dist", "image.tar"))
	installed := objects(t, filepath.Join(dir, "dist", "install.yaml"))

	svc := newServices(t)
	c := startCluster(t, svc.addr())
	admin, err := client.New(c.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(t.Context(), c.Assets.Kubectl(), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}

	// Applied for real: every object accepted.
	install := filepath.Join(dir, "dist", "install.yaml")
	if out, err := kubectl("apply", "--server-side", "-f", install); err != nil {
		t.Fatalf("kubectl apply --server-side -f dist/install.yaml: %v\n%s", err, out)
	}
	var deployment *appsv1.Deployment
	var configs []*unstructured.Unstructured
	for _, obj := range installed {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		if err := admin.Get(t.Context(), client.ObjectKeyFromObject(obj), live); err != nil {
			t.Errorf("%s %s after the apply: %v", obj.GetKind(), obj.GetName(), err)
		}
		switch o := typed(t, obj).(type) {
		case *appsv1.Deployment:
			deployment = o
		case *unstructured.Unstructured:
			if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
				configs = append(configs, live)
			}
		}
	}
	if deployment == nil || len(configs) == 0 {
		t.Fatalf("dist/install.yaml holds no Deployment or no webhook configuration")
	}
	if got := deployment.Spec.Template.Spec.Containers[0].Image; !slices.Contains(img.tags, got) {
		t.Errorf("the Deployment runs %s, not the image of dist/image.tar, %v", got, img.tags)
	}
	pod := scheduledPod(t, admin, deployment)
	svc.route(admin, pod)
	bin := operatorBinary(t, dir, rec.Module, img)

	// Before the operator serves, as installed without cert-manager: the
	// configurations are fail-open and carry no CA, and the Secret is
	// empty. The API server calls the webhook through its Service; nothing
	// serves behind it (in a cluster, the Service has no ready endpoint
	// yet; here, nothing listens on the pod's port), and with no CA the
	// API server could not trust a server that did. The call fails, and
	// the create, the update and even a forged status, which the
	// operator's webhook refuses once it serves, go through, unchecked:
	// nothing is refused for want of a certificate. The CRD's own
	// validation still applies.
	for _, cfg := range configs {
		if policy := webhooks(t, cfg, "failurePolicy"); !allAre(policy, "Ignore") {
			t.Errorf("%s: failurePolicy %v as installed, want Ignore", cfg.GetName(), policy)
		}
		if ca := webhooks(t, cfg, "clientConfig", "caBundle"); !allAre(ca, "") {
			t.Errorf("%s carries a CA as installed", cfg.GetName())
		}
	}
	unarmed := sample(t, dir, k, "unarmed")
	if err := admin.Create(t.Context(), unarmed); err != nil {
		t.Fatalf("creating a %s before the operator serves: %v", k.Kind, err)
	}
	if err := unstructured.SetNestedField(unarmed.Object, "changed", "spec", "data", "greeting"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Update(t.Context(), unarmed); err != nil {
		t.Errorf("updating a %s before the operator serves: %v", k.Kind, err)
	}
	if err := unstructured.SetNestedField(unarmed.Object, "Retired", "status", "state"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Status().Update(t.Context(), unarmed); err != nil {
		t.Errorf("forging the status of a %s before the operator serves: %v", k.Kind, err)
	}
	if called := svc.calls(rec.Name + "-webhook." + namespace + ".svc:443"); called < 3 {
		t.Errorf("the API server called the webhook through its Service %d times for three writes, want each write to call it", called)
	}
	secret := &corev1.Secret{}
	if err := admin.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: rec.Name + "-webhook-cert"}, secret); err != nil || len(secret.Data) != 0 {
		t.Errorf("the webhook's Secret before the operator runs: %v, data %v; want it installed, empty", err, slices.Collect(maps.Keys(secret.Data)))
	}
	if err := admin.Delete(t.Context(), unarmed); err != nil {
		t.Fatal(err)
	}

	// The operator, as the pod's container.
	op := startPod(t, c, admin, pod, deployment.Spec.Template.Spec, bin)
	op.await("the operator to make its certificate, inject its CA and arm the webhook configurations", 2*time.Minute, func() (bool, string) {
		if err := admin.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: rec.Name + "-webhook-cert"}, secret); err != nil {
			return false, err.Error()
		}
		if len(secret.Data["tls.crt"]) == 0 || len(secret.Data["ca.crt"]) == 0 {
			return false, "the Secret holds no certificate"
		}
		for _, cfg := range configs {
			if err := admin.Get(t.Context(), client.ObjectKeyFromObject(cfg), cfg); err != nil {
				return false, err.Error()
			}
			if ca := webhooks(t, cfg, "clientConfig", "caBundle"); !allAre(ca, base64.StdEncoding.EncodeToString(secret.Data["ca.crt"])) {
				return false, cfg.GetName() + " lacks the Secret's CA"
			}
			if policy := webhooks(t, cfg, "failurePolicy"); !allAre(policy, "Fail") {
				return false, fmt.Sprintf("%s: failurePolicy %v", cfg.GetName(), policy)
			}
		}
		return true, ""
	})

	// It drives the sample to Ready.
	if out, err := kubectl("apply", "--server-side", "--namespace=default", "-f", filepath.Join(dir, "config", "samples", k.Lower+".yaml")); err != nil {
		t.Fatalf("applying the sample: %v\n%s", err, out)
	}
	obj := sample(t, dir, k, "sample")
	op.await("the sample to be Ready", time.Minute, func() (bool, string) {
		if err := admin.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conditions {
			if c, ok := c.(map[string]any); ok && c["type"] == "Ready" && c["status"] == "True" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("status %v", obj.Object["status"])
	})

	// Its webhook refuses a goal that no path reaches, and a forged
	// status.
	patch := func(o client.Object, spec string) error {
		return admin.Patch(t.Context(), o, client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`)))
	}
	if err := patch(obj, `{"desiredState":"Retired"}`); err != nil {
		t.Fatalf("retiring the sample: %v", err)
	}
	op.await("the sample to be Retired", time.Minute, func() (bool, string) {
		if err := admin.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		state, _, _ := unstructured.NestedString(obj.Object, "status", "state")
		return state == "Retired", "state " + state
	})
	if err := patch(obj, `{"desiredState":"Ready"}`); err == nil || !strings.Contains(err.Error(), "no path leads from state Retired to goal Ready") {
		t.Errorf("asking the retired sample to be Ready: %v, want it refused by the webhook", err)
	}
	if err := unstructured.SetNestedField(obj.Object, "Pending", "status", "state"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Status().Update(t.Context(), obj); err == nil || !strings.Contains(err.Error(), "written by the operator of machine "+k.Lower+" only") {
		t.Errorf("forging the sample's status: %v, want it refused by the webhook", err)
	}

	// Its metrics, through their Service: to the metrics reader alone.
	metrics := "https://" + rec.Name + "-metrics." + namespace + ".svc:8443/metrics"
	reader := serviceAccountToken(t, c, admin, "scraper")
	bind(t, admin, "scraper", rec.Name+"-metrics-reader")
	if code, body := svc.curl(t, metrics, ""); code != http.StatusUnauthorized {
		t.Errorf("the metrics without a token: %d, want 401\n%.300s", code, body)
	}
	if code, body := svc.curl(t, metrics, serviceAccountToken(t, c, admin, "stranger")); code != http.StatusForbidden {
		t.Errorf("the metrics with a stranger's token: %d, want 403\n%.300s", code, body)
	}
	if code, body := svc.curl(t, metrics, reader); code != http.StatusOK || !strings.Contains(body, `kfsm_transitions_total{`) || !strings.Contains(body, `machine="`+k.Lower+`"`) {
		t.Errorf("the metrics with the reader's token: %d, want 200 and kfsm's series of machine %s\n%.300s", code, k.Lower, body)
	}

	// Applied again, the install's failurePolicy conflicts with the
	// operator's, which owns it once armed; forced, as make deploy
	// applies, it wins, and the configurations are fail-open again until
	// the operator, which still serves, arms them again.
	if out, err := kubectl("apply", "--server-side", "-f", install); err == nil || !strings.Contains(out, "failurePolicy") {
		t.Errorf("applying dist/install.yaml again, unforced: %v, want a conflict over failurePolicy\n%s", err, out)
	}
	out, err := kubectl("apply", "--server-side", "--force-conflicts", "-o", "json", "-f", install)
	if err != nil {
		t.Fatalf("applying dist/install.yaml again, forced: %v\n%s", err, out)
	}
	applied := &unstructured.UnstructuredList{}
	if err := applied.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatalf("kubectl apply -o json: %v\n%.300s", err, out)
	}
	disarmed := 0
	for i := range applied.Items {
		if cfg := &applied.Items[i]; strings.HasSuffix(cfg.GetKind(), "WebhookConfiguration") {
			disarmed++
			if policy := webhooks(t, cfg, "failurePolicy"); !allAre(policy, "Ignore") {
				t.Errorf("%s applied again: failurePolicy %v, want Ignore", cfg.GetName(), policy)
			}
		}
	}
	if disarmed != len(configs) {
		t.Errorf("applied again, %d webhook configurations, want %d", disarmed, len(configs))
	}
	op.await("the operator to arm the webhook configurations again", time.Minute, func() (bool, string) {
		for _, cfg := range configs {
			if err := admin.Get(t.Context(), client.ObjectKeyFromObject(cfg), cfg); err != nil {
				return false, err.Error()
			}
			if policy := webhooks(t, cfg, "failurePolicy"); !allAre(policy, "Fail") {
				return false, fmt.Sprintf("%s: failurePolicy %v", cfg.GetName(), policy)
			}
		}
		return true, ""
	})

	// Once it has stopped, the armed configurations fail closed: creates
	// and updates of the kind are refused.
	op.stop()
	late := sample(t, dir, k, "late")
	if err := admin.Create(t.Context(), late); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("creating a %s once the operator has stopped: %v, want it refused", k.Kind, err)
	}
	if err := patch(obj, `{"data":{"greeting":"late"}}`); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("updating the sample once the operator has stopped: %v, want it refused", err)
	}
}

// startCluster starts an embedded Kubernetes with the workloads tier,
// whose API server reaches Services through the proxy at proxy.
func startCluster(t *testing.T, proxy string) *cluster.Cluster {
	t.Helper()
	// The components take the environment they start with; this process
	// gets its own back.
	env := map[string]string{"HTTPS_PROXY": "http://" + proxy, "NO_PROXY": "127.0.0.1,localhost"}
	for name, value := range env {
		for _, name := range []string{name, strings.ToLower(name)} {
			old, had := os.LookupEnv(name)
			if err := os.Setenv(name, value); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if had {
					_ = os.Setenv(name, old)
				} else {
					_ = os.Unsetenv(name)
				}
			}()
		}
	}
	var progress bytes.Buffer
	c, err := cluster.Start(t.Context(), cluster.Options{Workloads: true, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// scheduledPod waits for the pod of d to be scheduled on a kwok node and
// reported Running.
func scheduledPod(t *testing.T, c client.Client, d *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	var why string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := c.List(t.Context(), &pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			t.Fatal(err)
		}
		why = fmt.Sprintf("%d pods", len(pods.Items))
		if len(pods.Items) != 1 {
			continue
		}
		pod := &pods.Items[0]
		node := &corev1.Node{}
		if pod.Spec.NodeName == "" || c.Get(t.Context(), client.ObjectKey{Name: pod.Spec.NodeName}, node) != nil {
			why = "the pod is not scheduled"
			continue
		}
		if _, kwok := node.Labels[cluster.NodeLabel]; !kwok {
			t.Fatalf("the pod is on node %s, which kwok does not run", node.Name)
		}
		if pod.Status.Phase == corev1.PodRunning {
			return pod
		}
		why = "the pod is " + string(pod.Status.Phase)
	}
	t.Fatalf("the Deployment's pod is not scheduled and Running after a minute: %s", why)
	return nil
}

// sample is the project's sample of kind k, named name, in the namespace
// default.
func sample(t *testing.T, dir string, k kind, name string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "config", "samples", k.Lower+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace("default")
	obj.SetName(name)
	return obj
}

// webhooks are the values of a field of each webhook of a configuration,
// as strings.
func webhooks(t *testing.T, cfg *unstructured.Unstructured, field ...string) []string {
	t.Helper()
	hooks, _, err := unstructured.NestedSlice(cfg.Object, "webhooks")
	if err != nil || len(hooks) == 0 {
		t.Fatalf("%s has no webhooks: %v", cfg.GetName(), err)
	}
	var values []string
	for _, h := range hooks {
		v, _, _ := unstructured.NestedString(h.(map[string]any), field...)
		values = append(values, v)
	}
	return values
}

func allAre(values []string, want string) bool {
	for _, v := range values {
		if v != want {
			return false
		}
	}
	return true
}

// serviceAccountToken makes a ServiceAccount of the namespace default and returns a
// token of it.
func serviceAccountToken(t *testing.T, c *cluster.Cluster, admin client.Client, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := admin.Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	return tokenRequest(t, c, sa, nil)
}

// tokenRequest returns a token of sa, bound to pod if not nil, as the
// kubelet asks for a pod's.
func tokenRequest(t *testing.T, c *cluster.Cluster, sa *corev1.ServiceAccount, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	expiry := int64(time.Hour / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(t.Context(), sa.Name, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// bind binds the ClusterRole role to the ServiceAccount sa of the
// namespace default.
func bind(t *testing.T, admin client.Client, sa, role string) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: sa}},
	}
	if err := admin.Create(t.Context(), binding); err != nil {
		t.Fatal(err)
	}
}

// services plays kube-proxy for the one pod that the test runs: an HTTP
// CONNECT proxy that leads NAME.NAMESPACE.svc:PORT to the pod's port that
// the Service's targetPort names, on loopback, if the Service selects the
// pod. The API server reaches the webhooks' Service through it
// (HTTPS_PROXY), and curl the metrics' (--proxy); in a cluster, the API
// server resolves the Service's cluster IP, which kube-proxy leads to the
// pod's IP.
type services struct {
	l net.Listener

	mu    sync.Mutex
	c     client.Client
	pod   *corev1.Pod
	tried map[string]int // connections asked for, by address
}

func newServices(t *testing.T) *services {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &services{l: l, tried: map[string]int{}}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go s.serve(conn)
		}
	}()
	return s
}

func (s *services) addr() string { return s.l.Addr().String() }

// route has the proxy lead Services to pod.
func (s *services) route(c client.Client, pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c, s.pod = c, pod
}

// calls is how many connections the proxy was asked for to addr.
func (s *services) calls(addr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tried[addr]
}

func (s *services) serve(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	r := bufio.NewReader(conn)
	req, err := http.ReadRequest(r)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	s.mu.Lock()
	s.tried[req.Host]++
	s.mu.Unlock()
	target, err := s.endpoint(req.Host)
	var up net.Conn
	if err == nil {
		up, err = net.DialTimeout("tcp", target, 5*time.Second)
	}
	if err != nil {
		msg := err.Error()
		fmt.Fprintf(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		return
	}
	defer func() { _ = up.Close() }()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(up, r)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(conn, up)
}

// endpoint is the address on loopback that a Service's address leads to.
func (s *services) endpoint(hostPort string) (string, error) {
	s.mu.Lock()
	c, pod := s.c, s.pod
	s.mu.Unlock()
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", err
	}
	parts := strings.Split(host, ".")
	if len(parts) != 3 || parts[2] != "svc" || pod == nil {
		return "", fmt.Errorf("%s is not the address of a Service that leads to the pod", host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	svc := &corev1.Service{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: parts[1], Name: parts[0]}, svc); err != nil {
		return "", err
	}
	if svc.Namespace != pod.Namespace || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		return "", fmt.Errorf("the Service %s/%s does not select the pod", svc.Namespace, svc.Name)
	}
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) != port {
			continue
		}
		if p.TargetPort.Type == intstr.Int {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.TargetPort.IntValue())), nil
		}
		for _, ctr := range pod.Spec.Containers {
			for _, cp := range ctr.Ports {
				if cp.Name == p.TargetPort.StrVal {
					return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(cp.ContainerPort))), nil
				}
			}
		}
	}
	return "", fmt.Errorf("the Service %s/%s has no port %s that leads to the pod", svc.Namespace, svc.Name, port)
}

// curl gets url through the proxy, as Prometheus scrapes it: with the
// bearer token if any, without checking the server's certificate, which
// the operator signs itself. It returns the status code and the body. curl
// is the real one, if this machine has it.
func (s *services) curl(t *testing.T, target, token string) (int, string) {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Log("no curl on this machine: Go's HTTP client gets", target)
		return s.get(t, target, token)
	}
	body := filepath.Join(t.TempDir(), "body")
	args := []string{"--silent", "--show-error", "--insecure", "--proxy", "http://" + s.addr(), "--output", body, "--write-out", "%{http_code}", target}
	if token != "" {
		args = append(args, "--header", "Authorization: Bearer "+token)
	}
	cmd := exec.CommandContext(t.Context(), path, args...)
	// Only the proxy of the arguments.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.HasSuffix(strings.ToLower(name), "_proxy") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %s: %v: %s", target, err, out)
	}
	code, err := strconv.Atoi(string(out))
	if err != nil {
		t.Fatalf("curl %s wrote %q", target, out)
	}
	data, err := os.ReadFile(body)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(data)
}

// get is what curl does, with Go's HTTP client.
func (s *services) get(t *testing.T, target, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	proxy := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: s.addr()}),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the operator's metrics certificate is self-signed
	}
	resp, err := (&http.Client{Transport: proxy}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// pod is the operator, run as the container of the Deployment's pod.
type pod struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    string // the operator's output
	grace  time.Duration
	exited chan struct{}
}

// startPod runs the one container of spec, the pod template of the
// Deployment of dist/install.yaml, as a process of this machine, for the
// pod p that the Deployment made, as the kubelet would, as far as it can
// without a container runtime:
//
//   - the image's entrypoint, the operator taken out of its layer, with
//     the container's arguments and environment; an environment variable
//     from the downward API gets the pod's field;
//   - a Secret volume is a directory of the test, which the Secret's data
//     is written into as the kubelet writes it (a directory of the files,
//     behind a ..data symlink that is switched at once), again when the
//     Secret changes, within a second (the kubelet, within a minute or
//     so); the arguments name it in place of its mount path, which the
//     process cannot have;
//   - the ServiceAccount token volume is a token of the pod's
//     ServiceAccount, bound to the pod, which the operator reads through
//     the kubeconfig of KUBECONFIG, since it looks for the token volume at
//     its mount path alone.
func startPod(t *testing.T, c *cluster.Cluster, admin client.Client, p *corev1.Pod, spec corev1.PodSpec, op operator) *pod {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("the pod has %d containers, want one", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	dir := t.TempDir()

	argv := append(slices.Clone(op.entrypoint), ctr.Args...)
	if len(ctr.Command) > 0 {
		argv = append(slices.Clone(ctr.Command), ctr.Args...)
	}
	if argv[0] != op.entrypoint[0] {
		t.Fatalf("the container runs %s, not the image's operator, %s", argv[0], op.entrypoint[0])
	}
	argv[0] = op.file

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, m := range ctr.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("the container mounts the volume %s, which the pod does not have", m.Name)
		}
		v := spec.Volumes[i]
		switch {
		case v.Secret != nil:
			volume := filepath.Join(dir, "volumes", v.Name)
			if err := os.MkdirAll(volume, 0o755); err != nil {
				t.Fatal(err)
			}
			go syncSecret(ctx, admin, types.NamespacedName{Namespace: p.Namespace, Name: v.Secret.SecretName}, volume)
			for i, arg := range argv {
				argv[i] = strings.ReplaceAll(arg, m.MountPath, volume)
			}
		case v.Projected != nil && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount":
			// The token, through KUBECONFIG below.
		default:
			t.Fatalf("the pod mounts the volume %s, which the test does not make", v.Name)
		}
	}

	if spec.ServiceAccountName != p.Spec.ServiceAccountName {
		t.Fatalf("the pod runs as %s, the Deployment's pods as %s", p.Spec.ServiceAccountName, spec.ServiceAccountName)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: spec.ServiceAccountName}}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tokenRequest(t, c, sa, p)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["cluster"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kubeconfig.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	kubeconfig.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "pod", Namespace: p.Namespace}
	kubeconfig.CurrentContext = "pod"
	if err := clientcmd.WriteToFile(*kubeconfig, filepath.Join(dir, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig")}
	for _, e := range ctr.Env {
		value := e.Value
		if f := e.ValueFrom; f != nil {
			if f.FieldRef == nil {
				t.Fatalf("the environment variable %s comes from a source that the test does not read", e.Name)
			}
			fields := map[string]string{"metadata.name": p.Name, "metadata.namespace": p.Namespace, "spec.serviceAccountName": p.Spec.ServiceAccountName, "spec.nodeName": p.Spec.NodeName}
			var ok bool
			if value, ok = fields[f.FieldRef.FieldPath]; !ok {
				t.Fatalf("the environment variable %s comes from %s, which the test does not read", e.Name, f.FieldRef.FieldPath)
			}
		}
		env = append(env, e.Name+"="+value)
	}

	// The pod's ports are this machine's.
	for _, cp := range ctr.Ports {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(int(cp.ContainerPort)))
		if err != nil {
			t.Fatalf("the pod's port %s: %v", cp.Name, err)
		}
		_ = l.Close()
	}

	proc := &pod{t: t, log: filepath.Join(dir, "operator.log"), grace: 30 * time.Second, exited: make(chan struct{})}
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		proc.grace = time.Duration(*g) * time.Second
	}
	logFile, err := os.Create(proc.log)
	if err != nil {
		t.Fatal(err)
	}
	proc.cmd = exec.Command(argv[0], argv[1:]...)
	proc.cmd.Env, proc.cmd.Dir = env, dir
	proc.cmd.Stdout, proc.cmd.Stderr = logFile, logFile
	if err := proc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = proc.cmd.Wait()
		_ = logFile.Close()
		close(proc.exited)
	}()
	t.Cleanup(func() {
		proc.stop()
		if t.Failed() {
			proc.dumpLog()
		}
	})
	return proc
}

// operator is the operator's binary, taken out of the image.
type operator struct {
	file       string   // on this machine
	entrypoint []string // the image's, which names it in the image
}

// operatorBinary takes the operator of module out of the image's layer,
// and checks what it links: go version -m lists the modules of a binary,
// and so cannot tell envtest's package from controller-runtime's others,
// nor kfsm's package cluster from kfsm's others. The image's binary is
// stripped (-s), so go tool nm finds no symbols in it; its function table
// (.gopclntab, which stack traces need) names the packages all the same.
func operatorBinary(t *testing.T, dir, module string, img image) operator {
	t.Helper()
	entrypoint := img.config.Config.Entrypoint
	if len(entrypoint) == 0 {
		t.Fatal("the image has no entrypoint")
	}
	data := img.layers[len(img.layers)-1][strings.TrimPrefix(entrypoint[0], "/")]
	if len(data) == 0 {
		t.Fatalf("the image's layer has no %s", entrypoint[0])
	}
	file := filepath.Join(t.TempDir(), "operator")
	if err := os.WriteFile(file, data, 0o755); err != nil {
		t.Fatal(err)
	}
	info := run(t, dir, "go", "version", "-m", file)
	for _, want := range []string{"\tpath\t" + module + "/cmd\n", "\tdep\tgithub.com/open-policy-agent/cert-controller\t"} {
		if !strings.Contains(info, want) {
			t.Errorf("go version -m of the image's operator lacks %q:\n%s", want, info)
		}
	}
	linked := packages(t, file)
	// The table sees the packages that the operator must link.
	for _, pkg := range []string{kfsmModule + "/fsm", "sigs.k8s.io/controller-runtime/pkg/manager", "github.com/open-policy-agent/cert-controller/pkg/rotator"} {
		if !linked[pkg] {
			t.Errorf("the function table of the image's operator names no function of %s", pkg)
		}
	}
	for _, pkg := range []string{"sigs.k8s.io/controller-runtime/pkg/envtest", kfsmModule + "/cluster"} {
		if linked[pkg] {
			t.Errorf("the image's operator links %s", pkg)
		}
	}
	return operator{file: file, entrypoint: entrypoint}
}

// packages are the packages of the functions of the function table of a
// Go binary for Linux, stripped or not.
func packages(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	pclntab, text := f.Section(".gopclntab"), f.Section(".text")
	if pclntab == nil || text == nil {
		t.Fatalf("%s has no function table", file)
	}
	data, err := pclntab.Data()
	if err != nil {
		t.Fatal(err)
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{}
	for _, fn := range table.Funcs {
		pkgs[fn.PackageName()] = true
	}
	return pkgs
}

// syncSecret writes the data of the Secret key into dir, as the kubelet
// writes a Secret volume, each time it changes, until ctx ends.
func syncSecret(ctx context.Context, c client.Client, key types.NamespacedName, dir string) {
	var written map[string][]byte
	for ; ; time.Sleep(time.Second) {
		if ctx.Err() != nil {
			return
		}
		secret := &corev1.Secret{}
		if err := c.Get(ctx, key, secret); err != nil {
			continue
		}
		if len(secret.Data) == 0 || maps.EqualFunc(secret.Data, written, bytes.Equal) {
			continue
		}
		if err := writeVolume(dir, secret.Data); err == nil {
			written = secret.Data
		}
	}
}

// writeVolume writes files into dir as the kubelet's atomic writer does: a
// new directory of them, which the symlink ..data is switched to at once,
// and a symlink to ..data/NAME for each.
func writeVolume(dir string, files map[string][]byte) error {
	data, err := os.MkdirTemp(dir, "..data_")
	if err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(data, name), content, 0o644); err != nil {
			return err
		}
	}
	link := filepath.Join(dir, "..data")
	old, _ := os.Readlink(link)
	if err := os.Symlink(filepath.Base(data), link+"_tmp"); err != nil {
		return err
	}
	if err := os.Rename(link+"_tmp", link); err != nil {
		return err
	}
	for name := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// await waits for cond, at most timeout, and fails the test with what
// cond said last and the operator's log if it does not hold by then.
func (op *pod) await(what string, timeout time.Duration, cond func() (bool, string)) {
	op.t.Helper()
	var said string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var ok bool
		if ok, said = cond(); ok {
			return
		}
		select {
		case <-op.exited:
			op.t.Fatalf("the operator exited while waiting for %s: %s", what, said)
		default:
		}
	}
	op.t.Fatalf("no %s after %s: %s", what, timeout, said)
}

// dumpLog logs the end of the operator's output.
func (op *pod) dumpLog() {
	data, _ := os.ReadFile(op.log)
	lines := strings.Split(string(data), "\n")
	op.t.Logf("the operator's log, last %d lines:\n%s", min(len(lines), 100), strings.Join(lines[max(0, len(lines)-100):], "\n"))
}

// stop stops the operator as the kubelet does: SIGTERM, then SIGKILL
// after the pod's grace period.
func (op *pod) stop() {
	select {
	case <-op.exited:
		return
	default:
	}
	_ = op.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-op.exited:
	case <-time.After(op.grace):
		_ = op.cmd.Process.Kill()
		<-op.exited
	}
}
