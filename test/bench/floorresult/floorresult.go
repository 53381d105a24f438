// Package floorresult is the fixed ADD result of the static exec floors:
// the bytes types.PrintResult prints for the skel floors' result. It imports
// nothing, so a floor that uses it links no more than it did.
package floorresult

// ADD is the result a floor prints for ADD.
const ADD = `{
    "cniVersion": "1.0.0",
    "ips": [
        {
            "address": "10.0.0.2/16",
            "gateway": "10.0.0.1"
        }
    ]
}`
