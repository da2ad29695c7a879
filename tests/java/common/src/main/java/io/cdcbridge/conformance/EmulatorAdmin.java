package io.cdcbridge.conformance;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The emulator's admin endpoints (JSON): split and merge shards while clients read, inject service errors. */
public final class EmulatorAdmin {
    private static final Pattern QUOTED = Pattern.compile("\"([^\"]*)\"");

    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    private final String baseUrl;

    public EmulatorAdmin(String endpoint) {
        this.baseUrl = endpoint.replaceAll("/+$", "") + "/_emulator/";
    }

    /** Split an open shard; the two children's ids. */
    public List<String> split(String table, String shardId) throws IOException, InterruptedException {
        String answer = post("split", "{\"table\": \"" + table + "\", \"shard_id\": \"" + shardId + "\"}");
        String list = answer.substring(answer.indexOf('[') + 1, answer.indexOf(']'));
        List<String> children = new ArrayList<>();
        Matcher matcher = QUOTED.matcher(list);
        while (matcher.find()) {
            children.add(matcher.group(1));
        }
        return children;
    }

    /** Merge two adjacent open shards; the child's id. */
    public String merge(String table, String shardId, String siblingShardId) throws IOException, InterruptedException {
        String answer = post("merge", "{\"table\": \"" + table + "\", \"shard_id\": \"" + shardId
                + "\", \"sibling_shard_id\": \"" + siblingShardId + "\"}");
        Matcher matcher = Pattern.compile("\"child\"\\s*:\\s*\"([^\"]*)\"").matcher(answer);
        if (!matcher.find()) {
            throw new IOException("the emulator's merge answer has no child: " + answer);
        }
        return matcher.group(1);
    }

    /** Answer the next `count` calls of `api` with the service error `errorCode` (replacing other fault rules). */
    public void failNext(String api, String errorCode, int count) throws IOException, InterruptedException {
        post("faults", "{\"rules\": [{\"api\": \"" + api + "\", \"error_code\": \"" + errorCode
                + "\", \"count\": " + count + "}]}");
    }

    public void clearFaults() throws IOException, InterruptedException {
        send("DELETE", "faults", HttpRequest.BodyPublishers.noBody());
    }

    private String post(String route, String json) throws IOException, InterruptedException {
        return send("POST", route, HttpRequest.BodyPublishers.ofString(json));
    }

    private String send(String method, String route, HttpRequest.BodyPublisher body)
            throws IOException, InterruptedException {
        HttpRequest request = HttpRequest.newBuilder(URI.create(baseUrl + route))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .method(method, body)
                .build();
        HttpResponse<String> response = http.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IOException(method + " /_emulator/" + route + " answered " + response.statusCode() + ": "
                    + response.body());
        }
        return response.body();
    }
}
