package satokens

import (
	"encoding/base64"
	"net/http"
	"testing"
)

func jwtWith(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + ".c2ln"
}

func TestProjectOfToken(t *testing.T) {
	for name, tc := range map[string]struct{ token, want string }{
		"project token":      {jwtWith(`{"sub":"x","milo.miloapis.com/project":"web"}`), "web"},
		"platform token":     {jwtWith(`{"sub":"x"}`), ""},
		"static token":       {"alice-token", ""},
		"claim not a string": {jwtWith(`{"milo.miloapis.com/project":["web"]}`), "(invalid)"},
		"empty claim":        {jwtWith(`{"milo.miloapis.com/project":""}`), "(invalid)"},
		"payload not base64": {"a.!!!.c", ""},
		"payload not json":   {"a." + base64.RawURLEncoding.EncodeToString([]byte("x")) + ".c", ""},
	} {
		if got := projectOfToken(tc.token); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer  abc ")
	if tok, header := bearerToken(req); tok != "abc" || !header {
		t.Fatalf("header token: %q %v", tok, header)
	}
	req.Header.Del("Authorization")
	req.Header.Set("Sec-WebSocket-Protocol", "v4.channel.k8s.io, "+websocketTokenPrefix+base64.RawURLEncoding.EncodeToString([]byte("def")))
	if tok, header := bearerToken(req); tok != "def" || header {
		t.Fatalf("websocket token: %q %v", tok, header)
	}
}
