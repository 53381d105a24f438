package k8s

import "encoding/json"

type conflistFacts struct {
	network string
	bridges []string
}

func parseConflist(b []byte) conflistFacts {
	var raw struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	var f conflistFacts
	if json.Unmarshal(b, &raw) != nil {
		return f
	}
	f.network = raw.Name
	for _, p := range raw.Plugins {
		if p["type"] == "bridge" {
			if br, ok := p["bridge"].(string); ok && br != "" {
				f.bridges = append(f.bridges, br)
			}
		}
	}
	return f
}
