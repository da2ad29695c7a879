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

/** The emulator's admin endpoints (`POST /_emulator/split|merge`, JSON), to reshape a stream while clients read it. */
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

    private String post(String route, String json) throws IOException, InterruptedException {
        HttpRequest request = HttpRequest.newBuilder(URI.create(baseUrl + route))
                .timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(json))
                .build();
        HttpResponse<String> response = http.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IOException("POST /_emulator/" + route + " answered " + response.statusCode() + ": "
                    + response.body());
        }
        return response.body();
    }
}
