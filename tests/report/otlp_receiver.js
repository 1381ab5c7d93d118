// An OTLP/HTTP receiver on loopback for the tests: @elastic/mockotlpserver (npm, pinned in
// web/package-lock.json), which decodes what an OpenTelemetry exporter sends as a collector's
// `otlp` receiver does. One JSON object a line on stdout, for otlp_receiver.py to read:
//
//   {"listening": "http://127.0.0.1:PORT"}          once, when it accepts connections
//   {"request": {"path", "headers"}}                 each request, as it arrives
//   {"metrics": <ExportMetricsServiceRequest>}       each metrics request, decoded and
//                                                    normalised (attributes as objects)
//
// Usage: node otlp_receiver.js PATH_TO_MOCKOTLPSERVER. It stops when its stdin closes, so
// it cannot outlive the test that started it.
'use strict';

const {MockOtlpServer, normalizeMetrics} = require(process.argv[2]);

function say(message) {
    process.stdout.write(JSON.stringify(message) + '\n');
}

async function main() {
    const server = new MockOtlpServer({
        logLevel: 'warn',
        services: ['http'],
        httpHostname: '127.0.0.1',
        httpPort: 0,
        onRequest: (req) => say({request: {path: req.path, headers: req.headers}}),
        onMetrics: (request) => say({metrics: normalizeMetrics(request)}),
    });
    await server.start();
    say({listening: String(server.httpUrl).replace(/\/$/, '')});
    process.stdin.resume();
    process.stdin.on('end', async () => {
        await server.close();
        process.exit(0);
    });
}

main().catch((err) => {
    process.stderr.write(`otlp_receiver.js: ${err.stack || err}\n`);
    process.exit(1);
});
